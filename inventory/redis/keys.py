"""Every key name of inventory's Redis, the script loader, and one enum per
script outcome.

All keys of one SKU share the hash tag `{<sku>}`, so each script touches a
single Cluster slot. Scripts are the files of `inventory/lua/`, prefixed with
the shared definitions and loaded once (core.redis.scripts.Scripts). Each enum names
the script it mirrors (`@_scripts.returns`), so a test can hold the two
side by side (inventory/tests/test_lua_codes.py).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

from django.conf import settings

from core.redis.connection import redis
from core.redis.keys import key, tagged, text
from core.redis.scripts import Scripts

LUA_DIR = Path(__file__).resolve().parent.parent / "lua"
# Scripts that answer data (lists, counts, a new figure), not an outcome.
_scripts = Scripts(LUA_DIR, answers_data=("due", "fences_due", "observe", "registry_add", "registry_swap",
                                          "settle", "warm_stage"))
_s = text

STAGE_TTL_SECONDS = 60
# Upper size of every list handed to one script call (ids, snapshot items).
SCRIPT_CHUNK = 500


# --- Return codes, one enum per script ---------------------------------------

@_scripts.returns("reserve")
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


@_scripts.returns("undo")
class UndoOutcome(enum.IntEnum):
    NOTHING = 0
    UNDONE = 1
    HELD = 2  # a confirm consumer holds it (hold.lua): the order goes on
    DONE = 3


@_scripts.returns("hold")
class Hold(str, enum.Enum):
    """Where each reservation a confirm consumer asked to hold stands (hold.lua's words)."""

    HELD = "held"
    MISSING = "missing"
    DONE = "done"
    UNDONE = "undone"


@_scripts.returns("give")
class Give(enum.IntEnum):
    ALREADY = 0
    APPLIED = 1
    NOT_WARM = -1


@_scripts.returns("freeze")
class Freeze(enum.IntEnum):
    REFUSED = 0
    TAKEN = 1
    ALREADY = 2
    NOT_WARM = -1


@_scripts.returns("freeze_cancel")
class FreezeCancel(enum.IntEnum):
    RESOLVED_BEFORE = 0
    GIVEN_BACK = 1
    BLOCKED = 2  # the take had not happened: a late freeze.lua answers "already"


@_scripts.returns("adjust")
class Adjust(enum.IntEnum):
    """adjust.lua's one coded answer; otherwise it answers the new available
    (or nil: already applied, or no snapshot)."""

    REFUSED = -1  # a whole lowering that did not fit: nothing changed


@_scripts.returns("meta")
class Meta(enum.IntEnum):
    NO_SNAPSHOT = 0
    UPDATED = 1
    STALE = 2


@_scripts.returns("drop_ended")
class Drop(enum.IntEnum):
    NO_SNAPSHOT = 0
    DROPPED = 1
    BUSY = 2       # reservations in flight or held, or a fence stands
    OPEN = 3       # Redis's gate still sells it (status active, window open or within the grace)
    NOT_OURS = 4   # another epoch than MySQL's, or the caller does not hold the warm lock


@_scripts.returns("rebuild")
class Rebuild(enum.IntEnum):
    REFUSED = 0  # reservations in flight
    DROPPED = 1


@_scripts.returns("warm")
class Load(enum.IntEnum):
    THERE = 0     # a snapshot was there already: nothing changed
    LOADED = 1
    NOT_FENCE = 2  # the fence is not this one any more: nothing changed


@_scripts.returns("fence")
class FenceRaise(enum.IntEnum):
    SNAPSHOT_THERE = 0  # nothing to fence
    RAISED = 1
    ALREADY = 2


@_scripts.returns("distrust")
class Distrust(enum.IntEnum):
    NOTHING_HERE = 0
    FENCED = 1  # dropped and fenced


@_scripts.returns("lock_release")
class LockRelease(enum.IntEnum):
    NOT_OURS = 0  # expired and taken, or gone
    RELEASED = 1


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

    def stage(self, token: str) -> tuple[str, str, str, str]:
        """Staging keys of one snapshot load: buyers, idem, idem-age, applied."""
        base = f"{self.tag}:stage:{token}"
        return f"{base}:buyers", f"{base}:idem", f"{base}:idem-age", f"{base}:applied"


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
SWEEPS_KEY = key("sweeps")  # hash task name -> last run (ms)
# Written by celery beat (seckill_site.beat): when the running beat started, and
# since when it holds each task in its schedule (set once, dropped when the task
# leaves the schedule): a sweep is not late before it could have run.
BEAT_STARTED_KEY = key("beat", "started")  # ms
BEAT_HELD_KEY = key("beat", "held")  # hash task name -> held since (ms)


# --- Scripts ---------------------------------------------------------------------

def _script(name: str):
    return _scripts.get(name)


def _ms(setting: str) -> int:
    return int(getattr(settings, setting)) * 1000


def _chunks(items: Sequence, size: int = SCRIPT_CHUNK) -> Iterable[Sequence]:
    for i in range(0, len(items), size):
        yield items[i:i + size]
