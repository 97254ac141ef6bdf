"""Every key name of inventory's Redis, the script loader, and each script's
layout: its KEYS and ARGV by name, and the enum of its outcomes.

All keys of one SKU share the hash tag `{<sku>}`, so each script touches a
single Cluster slot. Scripts are the files of `inventory/lua/`, prefixed with
the shared definitions and loaded once (core.redis.scripts.Scripts). A script is
called only through its layout (`RESERVE_LUA.run(k, user_id=..)`, core.lua_layout),
which takes its keys from the SKU's `SkuKeys` by name; tests hold each layout
against its script's header and guard (inventory/tests/test_lua_layouts.py)
and each enum against the codes it returns (inventory/tests/test_lua_codes.py).
"""
from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from django.conf import settings

from core.lua_layout import CODES_IN_HEADER, DATA, Layout, count_of, many
from core.redis.connection import redis
from core.redis.keys import key, tagged, text
from core.redis.scripts import Scripts

LUA_DIR = Path(__file__).resolve().parent.parent / "lua"
_scripts = Scripts(LUA_DIR)
_s = text

STAGE_TTL_SECONDS = 60
# Upper size of every list handed to one script call (ids, snapshot items).
SCRIPT_CHUNK = 500


# --- Each script's layout, after the enum of its outcomes ------------------------------------
# A script without an enum answers data (lists, counts, a new figure).

class Reserve(enum.IntEnum):
    OK = 0
    DUPLICATE = 1
    KEY_REUSED = 2
    SOLD_OUT = 3
    LIMIT_REACHED = 4
    NOT_ACTIVE = 5
    NOT_WARMED = 6
    UNKNOWN_SKU = 7
    RETIRED = 8
    FENCED = 9


RESERVE_LUA = Layout(_scripts, "reserve", answers=Reserve,
                     keys=("stock", "buyers", "inflight", "idem", "idem_age", "due", "missing", "undone", "fence"),
                     argv=("user_id", "quantity", "idempotency_key", "order_id", "grace_ms", "idempotency_ms",
                           "deciding_ms"))


class UndoOutcome(enum.IntEnum):
    NOTHING = 0
    UNDONE = 1
    HELD = 2  # a confirm consumer holds it (hold.lua): the order goes on
    DONE = 3


UNDO_LUA = Layout(_scripts, "undo", answers=UndoOutcome,
                  keys=("stock", "buyers", "inflight", "idem", "idem_age", "due", "holds", "done", "undone"),
                  argv=("order_id", "lifetime_ms"))


class Hold(enum.StrEnum):
    """Where each reservation a confirm consumer asked to hold stands (hold.lua's words)."""

    HELD = "held"
    MISSING = "missing"
    DONE = "done"
    UNDONE = "undone"


HOLD_LUA = Layout(_scripts, "hold", answers=Hold, keys=("inflight", "holds", "done", "undone"),
                  argv=(many("order_ids"),))
SETTLE_LUA = Layout(_scripts, "settle", answers=DATA, keys=("stock", "buyers", "inflight", "due", "holds", "done"),
                    argv=(count_of("confirmed"), count_of("dropped"), "lifetime_ms",
                          many("confirmed"), many("dropped"), many("returned")))
DUE_LUA = Layout(_scripts, "due", answers=DATA, keys=("inflight", "due", "holds"),
                 argv=("cap", "grace_ms", "longest_ms", "ahead_ms"))
OBSERVE_LUA = Layout(_scripts, "observe", answers=DATA, keys=("stock", "inflight", "applied"),
                     argv=(many("op_ids"),))


class Give(enum.IntEnum):
    ALREADY = 0
    APPLIED = 1
    NOT_WARM = -1


GIVE_LUA = Layout(_scripts, "give", answers=Give, keys=("stock", "buyers", "applied"),
                  argv=("op_id", "quantity", "user_id", "total_delta", "frozen_delta", "lifetime_ms"))


class Freeze(enum.IntEnum):
    REFUSED = 0
    TAKEN = 1
    ALREADY = 2
    NOT_WARM = -1


FREEZE_LUA = Layout(_scripts, "freeze", answers=Freeze, keys=("stock", "applied"),
                    argv=("op_id", "quantity", "lifetime_ms"))


class FreezeCancel(enum.IntEnum):
    RESOLVED_BEFORE = 0
    GIVEN_BACK = 1
    BLOCKED = 2  # the take had not happened: a late freeze.lua answers "already"


FREEZE_CANCEL_LUA = Layout(_scripts, "freeze_cancel", answers=FreezeCancel, keys=("stock", "applied"),
                           argv=("op_id", "quantity", "lifetime_ms"))


class Adjust(enum.IntEnum):
    """adjust.lua's one coded answer; otherwise it answers the new available
    (or nil: already applied, or no snapshot)."""

    REFUSED = -1  # a whole lowering that did not fit: nothing changed


ADJUST_LUA = Layout(_scripts, "adjust", answers=Adjust, keys=("stock", "applied"),
                    argv=("repair_id", "delta", "lifetime_ms", "whole"))


class Meta(enum.IntEnum):
    NO_SNAPSHOT = 0
    UPDATED = 1
    STALE = 2


META_LUA = Layout(_scripts, "meta", answers=Meta, keys=("stock",),
                  argv=("per_user_limit", "starts_ms", "ends_ms", "status", "version", "unit_price"))


class Drop(enum.IntEnum):
    NO_SNAPSHOT = 0
    DROPPED = 1
    BUSY = 2       # reservations in flight or held, or a fence stands
    OPEN = 3       # Redis's gate still sells it (status active, window open or within the grace)
    NOT_OURS = 4   # another epoch than MySQL's, or the caller does not hold the warm lock


DROP_ENDED_LUA = Layout(_scripts, "drop_ended", answers=Drop,
                        keys=("stock", "buyers", "inflight", "idem", "idem_age", "due", "holds", "done", "undone",
                              "applied", "fence", "lock"),
                        argv=("epoch", "lock_token", "grace_ms"))


class Rebuild(enum.IntEnum):
    REFUSED = 0  # reservations in flight
    DROPPED = 1


REBUILD_LUA = Layout(_scripts, "rebuild", answers=Rebuild,
                     keys=("stock", "inflight", "buyers", "idem", "idem_age", "applied"))


class Load(enum.IntEnum):
    THERE = 0     # a snapshot was there already: nothing changed
    LOADED = 1
    NOT_FENCE = 2  # the fence is not this one any more: nothing changed


_STAGE_KEYS = ("stage_buyers", "stage_idem", "stage_idem_age", "stage_applied")
WARM_STAGE_LUA = Layout(_scripts, "warm_stage", answers=DATA, keys=_STAGE_KEYS,
                        argv=("kind", "ttl_s", many("items")))
WARM_LUA = Layout(_scripts, "warm", answers=Load,
                  keys=("stock", "buyers", "idem", "idem_age", "applied", "missing", "inflight", *_STAGE_KEYS,
                        "fence"),
                  argv=("available", "total", "frozen", "epoch", "version", "per_user_limit", "starts_ms", "ends_ms",
                        "status", "unit_price", "fence_token"))


class FenceRaise(enum.IntEnum):
    SNAPSHOT_THERE = 0  # nothing to fence
    RAISED = 1
    ALREADY = 2


FENCE_LUA = Layout(_scripts, "fence", answers=FenceRaise, keys=("stock", "fence"), argv=("fence_id", "delay_ms"))
FENCES_DUE_LUA = Layout(_scripts, "fences_due", answers=DATA, keys=("fences",), argv=("cap", "again_ms"))


class Distrust(enum.IntEnum):
    NOTHING_HERE = 0
    FENCED = 1  # dropped and fenced


DISTRUST_LUA = Layout(_scripts, "distrust", answers=Distrust,
                      keys=("stock", "buyers", "inflight", "idem", "idem_age", "due", "holds", "applied", "fence"),
                      argv=("fence_id", "delay_ms"))
LOCK_RELEASE_LUA = Layout(_scripts, "lock_release", answers=CODES_IN_HEADER, keys=("lock",), argv=("token",))
REGISTRY_ADD_LUA = Layout(_scripts, "registry_add", answers=DATA, keys=("registry", "recent"),
                          argv=("sku_id", "recent_ms"))
REGISTRY_SWAP_LUA = Layout(_scripts, "registry_swap", answers=DATA, keys=("registry", "staged", "recent", "complete"),
                           argv=("recent_ms", "complete_s"))


# --- Key names -----------------------------------------------------------------

@dataclass(frozen=True)
class SkuKeys:
    stock: str
    buyers: str
    inflight: str
    idem: str
    idem_age: str
    due: str
    # Stored names outlive a word's change (a key in flight keeps its name
    # across an upgrade): the holds are stored as `claims`, the undone marker
    # as `released`.
    holds: str  # the reservations confirm consumers hold (hold.lua)
    done: str
    undone: str  # order ids their requests took back (undo.lua)
    applied: str
    missing: str
    lock: str
    fence: str
    tag: str

    def stage(self, token: str) -> StageKeys:
        """Staging keys of one snapshot load."""
        base = f"{self.tag}:stage:{token}"
        return StageKeys(stage_buyers=f"{base}:buyers", stage_idem=f"{base}:idem",
                         stage_idem_age=f"{base}:idem-age", stage_applied=f"{base}:applied")


@dataclass(frozen=True)
class StageKeys:
    """The keys one snapshot load stages its parts in (warm_stage.lua), until
    warm.lua moves them into place."""

    stage_buyers: str
    stage_idem: str
    stage_idem_age: str
    stage_applied: str


@lru_cache(maxsize=4096)
def sku_keys(sku_id: str) -> SkuKeys:
    tag = tagged(sku_id)
    return SkuKeys(
        stock=f"{tag}:stock", buyers=f"{tag}:buyers", inflight=f"{tag}:inflight", idem=f"{tag}:idem",
        idem_age=f"{tag}:idem-age", due=f"{tag}:due", holds=f"{tag}:claims", done=f"{tag}:done",
        undone=f"{tag}:released", applied=f"{tag}:applied", missing=f"{tag}:missing",
        lock=f"{tag}:warm-lock", fence=f"{tag}:fence", tag=tag,
    )


def sku_key_names(*, sku_id: str) -> list[str]:
    """Every key this Redis holds of one SKU (SCAN of its hash tag: tests and ops)."""
    tag = sku_keys(sku_id).tag.replace("[", "\\[").replace("*", "\\*").replace("?", "\\?")
    return sorted(_s(k) for k in redis().scan_iter(match=f"{tag}:*", count=1000))


FENCES_KEY = key("fences")  # zset sku -> when its fence may be sent (next), ms
# The registry of SKU ids MySQL has (one Cluster slot: its scripts touch all four).
SKU_REGISTRY = tagged("sku-registry")
SKU_REGISTRY_COMPLETE = f"{SKU_REGISTRY}:complete"
SKU_REGISTRY_RECENT = f"{SKU_REGISTRY}:recent"
CONSUMERS_KEY = key("consumers")  # zset identity -> last beat (ms)
# When each confirm consumer registered on its queue, for brokers whose single
# active consumer is the first registered (orders.consumers, "hand back").
REGISTERED_KEY = key("consumers", "registered")  # hash member -> "before:after:preferred"
REGISTERED_SEQ_KEY = key("consumers", "registered", "seq")  # counter of the numbers above
SWEEPS_KEY = key("sweeps")  # hash task name -> last run (ms)
# Written by celery beat (seckill_site.beat): when the running beat started, and
# since when it holds each task in its schedule (set once, dropped when the task
# leaves the schedule): a sweep is not late before it could have run.
BEAT_STARTED_KEY = key("beat", "started")  # ms
BEAT_HELD_KEY = key("beat", "held")  # hash task name -> held since (ms)


# --- Helpers of the script calls --------------------------------------------------

def _ms(setting: str) -> int:
    return int(getattr(settings, setting)) * 1000


def _chunks(items: Sequence, size: int = SCRIPT_CHUNK) -> Iterable[Sequence]:
    for i in range(0, len(items), size):
        yield items[i:i + size]
