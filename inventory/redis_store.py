"""The Redis gate: every key name, entry format and Lua call of inventory.

All keys of one SKU share the hash tag `{<sku>}`, so each script touches a
single Cluster slot. Scripts are the files of `lua/`, prefixed with the shared
definitions and loaded once (core.redis.Scripts); the connection comes from
django-redis. No ORM here.
"""
from __future__ import annotations

import enum
import time
import uuid
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

from django.conf import settings

from core.redis import Call, RedisError, Scripts, redis, text  # noqa: F401  (RedisError re-exported)

LUA_DIR = Path(__file__).resolve().parent / "lua"
_scripts = Scripts(LUA_DIR)
_s = text

MISSING_SKU_TTL_SECONDS = 30
WARM_LOCK_MS = 5000
STAGE_TTL_SECONDS = 60
# Upper size of every list handed to one script call (ids, snapshot items).
SCRIPT_CHUNK = 500


# --- Return codes, one enum per script ---------------------------------------

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


class Release(enum.IntEnum):
    NOTHING = 0
    RELEASED = 1
    CLAIMED = 2
    DONE = 3


class Claim(str, enum.Enum):
    CLAIMED = "claimed"
    MISSING = "missing"
    DONE = "done"
    RELEASED = "released"


class Give(enum.IntEnum):
    ALREADY = 0
    APPLIED = 1
    NOT_WARM = -1


class Freeze(enum.IntEnum):
    REFUSED = 0
    TAKEN = 1
    ALREADY = 2
    NOT_WARM = -1


class Meta(enum.IntEnum):
    NO_SNAPSHOT = 0
    UPDATED = 1
    STALE = 2


# --- Key names -----------------------------------------------------------------

@dataclass(frozen=True)
class SkuKeys:
    stock: str
    buyers: str
    inflight: str
    idem: str
    idem_age: str
    due: str
    claims: str
    done: str
    released: str
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
    tag = f"seckill:{{{sku_id}}}"
    return SkuKeys(
        stock=f"{tag}:stock", buyers=f"{tag}:buyers", inflight=f"{tag}:inflight", idem=f"{tag}:idem",
        idem_age=f"{tag}:idem-age", due=f"{tag}:due", claims=f"{tag}:claims", done=f"{tag}:done",
        released=f"{tag}:released", applied=f"{tag}:applied", missing=f"{tag}:missing",
        lock=f"{tag}:warm-lock", fence=f"{tag}:fence", tag=tag,
    )


# --- Scripts ---------------------------------------------------------------------

def _script(name: str):
    return _scripts.get(name)


def _ms(setting: str) -> int:
    return int(getattr(settings, setting)) * 1000


def _chunks(items: Sequence, size: int = SCRIPT_CHUNK) -> Iterable[Sequence]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


# --- Reservations --------------------------------------------------------------------

@dataclass(frozen=True)
class Reservation:
    """A reservation taken by the gate: what the in-flight entry, the confirm
    message and the confirm all describe (formats: `lua/_lib.lua`, `messages`)."""

    order_id: str
    sku_id: str
    user_id: int
    quantity: int
    idempotency_key: str
    reserved_ms: int
    epoch: int = 0

    @classmethod
    def from_entry(cls, sku_id: str, order_id: str | bytes, entry: str | bytes) -> "Reservation":
        user, qty, ms, epoch, key = _s(entry).split("|", 4)
        return cls(_s(order_id), sku_id, int(user), int(qty), key, int(ms), int(epoch))


@dataclass(frozen=True)
class ReserveResult:
    code: Reserve
    order_id: str = ""
    value: int = 0
    limit: int = 0
    reserved_ms: int = 0
    epoch: int = 0
    wait_ms: int = 0  # DUPLICATE: the first request may still be deciding for this long


# Beyond the publish budget, this much more (clock rates, scheduling).
DECISION_MARGIN_MS = 500


def decision_window_ms() -> int:
    """How long after its reserve a request may still be deciding: by then its
    publish was confirmed (the message is in the queue) or it gave up and
    undid its take (answered 503, recorded as released)."""
    return int(settings.SECKILL_PUBLISH_BUDGET_MS) + DECISION_MARGIN_MS


def reserve_call(*, sku_id: str, user_id: int, quantity: int, idempotency_key: str, order_id: str) -> Call:
    """The reserve as a call that can ride in a pipeline (see orders' place)."""
    k = sku_keys(sku_id)
    keys = [k.stock, k.buyers, k.inflight, k.idem, k.idem_age, k.due, k.missing, k.released, k.fence]
    args = [user_id, quantity, idempotency_key, order_id, _ms("SECKILL_ORPHAN_GRACE_SECONDS"),
            _ms("SECKILL_IDEMPOTENCY_SECONDS"), decision_window_ms()]
    return Call(_script("reserve"), keys, args)


def reserve_result(raw) -> ReserveResult:
    code = Reserve(int(raw[0]))
    if code is Reserve.OK:
        return ReserveResult(code, _s(raw[1]), int(raw[2]), reserved_ms=int(raw[3]), epoch=int(raw[4]))
    if code is Reserve.DUPLICATE:
        return ReserveResult(code, _s(raw[1]), int(raw[2]), wait_ms=int(raw[3]))
    if code is Reserve.KEY_REUSED:
        return ReserveResult(code, _s(raw[1]))
    if code is Reserve.SOLD_OUT:
        return ReserveResult(code, value=int(raw[1]), epoch=int(raw[2]))
    if code is Reserve.LIMIT_REACHED:
        return ReserveResult(code, value=int(raw[1]), limit=int(raw[2]))
    return ReserveResult(code)


def reserve(*, sku_id: str, user_id: int, quantity: int, idempotency_key: str, order_id: str) -> ReserveResult:
    return reserve_result(reserve_call(sku_id=sku_id, user_id=user_id, quantity=quantity,
                                       idempotency_key=idempotency_key, order_id=order_id).run())


def release(*, sku_id: str, order_id: str) -> Release:
    k = sku_keys(sku_id)
    return Release(int(_script("release")(
        keys=[k.stock, k.buyers, k.inflight, k.idem, k.idem_age, k.due, k.claims, k.done, k.released],
        args=[order_id, _ms("SECKILL_MARKER_LIFETIME_SECONDS")])))


def claim(*, sku_id: str, order_ids: Sequence[str]) -> tuple[dict[str, Claim], list[Reservation]]:
    """Claim reservations for a confirm. Returns each id's state and the claimed
    reservations as Redis holds them."""
    k = sku_keys(sku_id)
    states: dict[str, Claim] = {}
    items: list[Reservation] = []
    for part in _chunks(list(order_ids)):
        raw = _script("claim")(keys=[k.inflight, k.claims, k.done, k.released], args=list(part))
        n = len(part)
        states.update({oid: Claim(_s(raw[i])) for i, oid in enumerate(part)})
        items += [Reservation.from_entry(sku_id, raw[i], raw[i + 1]) for i in range(n, len(raw), 2)]
    return states, items


def settle(*, sku_id: str, confirmed: Sequence[str], failed: Sequence[str] = (),
           given_back: Sequence[str] = ()) -> int:
    """Close reservations the confirm decided (see settle.lua for the three lists)."""
    k = sku_keys(sku_id)
    keys = [k.stock, k.buyers, k.inflight, k.due, k.claims, k.done]
    lifetime = _ms("SECKILL_DONE_MARKER_SECONDS")
    settled = 0
    tagged = [(0, o) for o in confirmed] + [(1, o) for o in failed] + [(2, o) for o in given_back]
    for part in _chunks(tagged):
        c = [o for t, o in part if t == 0]
        f = [o for t, o in part if t == 1]
        g = [o for t, o in part if t == 2]
        settled += int(_script("settle")(keys=keys, args=[len(c), len(f), lifetime, *c, *f, *g]))
    return settled


def due(*, sku_id: str, cap: int, ahead_ms: int = 0) -> list[Reservation]:
    """Reservations the orphan sweep should publish again (each gets its next deadline)."""
    k = sku_keys(sku_id)
    raw = _script("due")(keys=[k.inflight, k.due, k.claims],
                         args=[cap, _ms("SECKILL_ORPHAN_GRACE_SECONDS"), _ms("SECKILL_ORPHAN_MAX_WAIT_SECONDS"),
                               ahead_ms])
    return [Reservation.from_entry(sku_id, raw[i], raw[i + 1]) for i in range(0, len(raw), 2)]


def inflight_entries(*, sku_id: str) -> list[Reservation]:
    """Every reservation in flight (tests and the admin; bounded by what is in flight)."""
    raw = redis().hgetall(sku_keys(sku_id).inflight)
    return [Reservation.from_entry(sku_id, oid, e) for oid, e in raw.items()]


def inflight_count(*, sku_ids: Sequence[str]) -> dict[str, int]:
    pipe = redis().pipeline(transaction=False)
    for sku_id in sku_ids:
        pipe.hlen(sku_keys(sku_id).inflight)
    return dict(zip(sku_ids, (int(n) for n in pipe.execute())))


def inflight_find(*, candidates: Sequence[tuple[str, str]]) -> list[Reservation]:
    """Which of these (sku_id, order_id) pairs are in flight (one round trip)."""
    if not candidates:
        return []
    pipe = redis().pipeline(transaction=False)
    for sku_id, order_id in candidates:
        pipe.hget(sku_keys(sku_id).inflight, order_id)
    return [Reservation.from_entry(sku_id, oid, e)
            for (sku_id, oid), e in zip(candidates, pipe.execute()) if e is not None]


def is_settled(*, sku_id: str, order_id: str) -> bool:
    return redis().zscore(sku_keys(sku_id).done, order_id) is not None


def settled_forget(*, sku_id: str, order_id: str) -> None:
    """Drop a reservation's settled marker, so that the consumer confirms its
    message again (a dead-letter replay that took its unit back first)."""
    redis().zrem(sku_keys(sku_id).done, order_id)


# --- Gives, freezes, repairs, sale data -----------------------------------------------

def give(*, sku_id: str, op_id: str, quantity: int, user_id: int | None = None,
         total_delta: int = 0, frozen_delta: int = 0) -> Give:
    k = sku_keys(sku_id)
    return Give(int(_script("give")(
        keys=[k.stock, k.buyers, k.applied],
        args=[op_id, quantity, "" if user_id is None else user_id, total_delta, frozen_delta,
              _ms("SECKILL_MARKER_LIFETIME_SECONDS")])))


def freeze(*, sku_id: str, op_id: str, quantity: int) -> Freeze:
    k = sku_keys(sku_id)
    return Freeze(int(_script("freeze")(keys=[k.stock, k.applied],
                                        args=[op_id, quantity, _ms("SECKILL_MARKER_LIFETIME_SECONDS")])))


def freeze_cancel(*, sku_id: str, op_id: str, quantity: int) -> int:
    k = sku_keys(sku_id)
    return int(_script("freeze_cancel")(keys=[k.stock, k.applied],
                                        args=[op_id, quantity, _ms("SECKILL_MARKER_LIFETIME_SECONDS")]))


def is_applied(*, sku_id: str, op_id: str) -> bool:
    return redis().zscore(sku_keys(sku_id).applied, op_id) is not None


ADJUST_REFUSED = -1  # adjust.lua: a whole lowering that did not fit


def adjust_available(*, sku_id: str, repair_id: str, delta: int, whole: bool = False) -> int | None:
    """Move Redis's available by `delta`, once per `repair_id`; None when
    already applied or no snapshot. A lowering is clamped at zero, or with
    `whole` refused (ADJUST_REFUSED, nothing changed) when it does not fit."""
    k = sku_keys(sku_id)
    out = _script("adjust")(keys=[k.stock, k.applied],
                            args=[repair_id, delta, _ms("SECKILL_MARKER_LIFETIME_SECONDS"),
                                  *(["whole"] if whole else [])])
    return None if out is None else int(out)


def meta_update(*, sku_id: str, per_user_limit: int, starts_ms: int, ends_ms: int, status: str,
                version: int) -> Meta:
    return Meta(int(_script("meta")(keys=[sku_keys(sku_id).stock],
                                    args=[per_user_limit, starts_ms, ends_ms, status, version])))


class Drop(enum.IntEnum):
    NO_SNAPSHOT = 0
    DROPPED = 1
    BUSY = 2       # reservations in flight or claimed, or a fence stands
    OPEN = 3       # Redis's gate still sells it (status active, window open or within the grace)
    NOT_OURS = 4   # another epoch than MySQL's, or the caller does not hold the warm lock


def snapshot_drop_ended(*, sku_id: str, epoch: int, lock_token: str, grace_ms: int) -> Drop:
    """Drop every key of an ended SKU at once, where nothing could need them
    (see drop_ended.lua; the caller holds the warm lock and marks MySQL after)."""
    k = sku_keys(sku_id)
    return Drop(int(_script("drop_ended")(
        keys=[k.stock, k.buyers, k.inflight, k.idem, k.idem_age, k.due, k.claims, k.done, k.released, k.applied,
              k.fence, k.lock],
        args=[epoch, lock_token, grace_ms])))


def sku_key_names(*, sku_id: str) -> list[str]:
    """Every key this Redis holds of one SKU (SCAN of its hash tag: tests and ops)."""
    tag = sku_keys(sku_id).tag.replace("[", "\\[").replace("*", "\\*").replace("?", "\\?")
    return sorted(_s(k) for k in redis().scan_iter(match=f"{tag}:*", count=1000))


def snapshot_drop_if_idle(*, sku_id: str) -> bool:
    k = sku_keys(sku_id)
    return bool(_script("rebuild")(keys=[k.stock, k.inflight, k.buyers, k.idem, k.idem_age, k.applied], args=[]))


@dataclass(frozen=True)
class Observation:
    available: int | None  # None: no snapshot
    inflight: list[Reservation]
    applied: dict[str, bool]


def observe(*, sku_id: str, op_ids: Sequence[str]) -> Observation:
    k = sku_keys(sku_id)
    avail, flat, flags = _script("observe")(keys=[k.stock, k.inflight, k.applied], args=list(op_ids))
    entries = [Reservation.from_entry(sku_id, flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
    return Observation(None if avail is None else int(avail), entries,
                       {g: bool(f) for g, f in zip(op_ids, flags)})


# --- Snapshots ----------------------------------------------------------------------

@dataclass(frozen=True)
class Snapshot:
    available: int
    total: int
    frozen: int
    version: int
    per_user_limit: int
    starts_ms: int
    ends_ms: int
    status: str
    buyers: dict[int, int]
    # "user:key" -> ("order_id|quantity", recorded ms)
    idempotency: dict[str, tuple[str, int]]
    applied_ops: tuple[str, ...] = ()
    epoch: int = 1


def snapshot_exists(*, sku_id: str) -> bool:
    return bool(redis().exists(sku_keys(sku_id).stock))


class Load(enum.IntEnum):
    THERE = 0     # a snapshot was there already: nothing changed
    LOADED = 1
    NOT_FENCE = 2  # the fence is not this one any more: nothing changed


def snapshot_load(*, sku_id: str, snapshot: Snapshot, fence: str = "") -> Load:
    """Write the snapshot unless one is there already (and, for a rebuild behind
    a fence, only while that fence stands; loading clears it).

    The parts are staged in bounded chunks, then moved into place by one script,
    so the gate never sees half a snapshot."""
    k = sku_keys(sku_id)
    stage = k.stage(uuid.uuid4().hex)
    stager = _script("warm_stage")
    buyers = [x for pair in snapshot.buyers.items() for x in pair]
    idem = [x for field, (value, ms) in snapshot.idempotency.items() for x in (field, value, ms)]
    for kind, flat, width in (("b", buyers, 2), ("i", idem, 3), ("a", list(snapshot.applied_ops), 1)):
        for part in _chunks(flat, SCRIPT_CHUNK * width):
            stager(keys=list(stage), args=[kind, STAGE_TTL_SECONDS, *part])
    header = [snapshot.available, snapshot.total, snapshot.frozen, snapshot.epoch, snapshot.version,
              snapshot.per_user_limit, snapshot.starts_ms, snapshot.ends_ms, snapshot.status]
    return Load(int(_script("warm")(
        keys=[k.stock, k.buyers, k.idem, k.idem_age, k.applied, k.missing, k.inflight, *stage, k.fence],
        args=[*header, fence])))


# --- Fences: a lost snapshot is rebuilt behind the broker --------------------------------

FENCES_KEY = "seckill:fences"  # zset sku -> when its fence may be sent (next), ms
# A fence message lost (broker restarted before it was stored) is sent again after this.
FENCE_AGAIN_MS = 5000


@dataclass(frozen=True)
class Fence:
    sku_id: str
    token: str  # "<id>|<not before, ms>"

    @property
    def not_before_ms(self) -> int:
        return int(self.token.rsplit("|", 1)[1])


def fence_raise(*, sku_id: str, delay_ms: int) -> Fence | None:
    """Fence a SKU whose snapshot is gone (None: a snapshot is there). Idempotent:
    a SKU fenced already keeps its fence. The fence is then listed as due at
    its not-before time (listing again is harmless, so a fencer that died
    between the two calls is mended by the next)."""
    k = sku_keys(sku_id)
    raw = _script("fence")(keys=[k.stock, k.fence], args=[uuid.uuid4().hex, delay_ms])
    if int(raw[0]) == 0:
        return None
    fence = Fence(sku_id, _s(raw[1]))
    redis().zadd(FENCES_KEY, {sku_id: fence.not_before_ms}, nx=True)
    return fence


def _fence_tokens(sku_ids: Sequence[str]) -> dict[str, str | None]:
    """Each SKU's fence token, None where it has none (one round trip)."""
    pipe = redis().pipeline(transaction=False)
    for sku_id in sku_ids:
        pipe.get(sku_keys(sku_id).fence)
    return {sku_id: None if t is None else _s(t) for sku_id, t in zip(sku_ids, pipe.execute())}


def fences_due(*, cap: int = 100) -> list[Fence]:
    """Fences that may be sent now (each is due again FENCE_AGAIN_MS later);
    a listed SKU that has no fence any more leaves the list."""
    skus = [_s(x) for x in _script("fences_due")(keys=[FENCES_KEY], args=[cap, FENCE_AGAIN_MS])]
    if not skus:
        return []
    tokens = _fence_tokens(skus)
    gone = [sku_id for sku_id, token in tokens.items() if token is None]
    if gone:
        redis().zrem(FENCES_KEY, *gone)
    return [Fence(sku_id, token) for sku_id, token in tokens.items() if token is not None]


def _skus_with(suffix: str) -> set[str]:
    """SKU ids that have a `seckill:{<sku>}:<suffix>` key (SCAN: a rare, whole-keyspace walk)."""
    head, tail = "seckill:{", "}:" + suffix
    return {_s(k)[len(head):-len(tail)] for k in redis().scan_iter(match=f"seckill:{{*}}:{suffix}", count=1000)}


def snapshots_fence_all(*, delay_ms: int) -> list[Fence]:
    """Drop every snapshot this Redis holds and fence its SKU (distrust.lua); a
    fence found is replaced by one counted from now. For a new instance whose
    data may be older than what was lost."""
    fences = []
    for sku_id in sorted(_skus_with("stock") | _skus_with("fence")):
        k = sku_keys(sku_id)
        raw = _script("distrust")(keys=[k.stock, k.buyers, k.inflight, k.idem, k.idem_age, k.due, k.claims,
                                        k.applied, k.fence], args=[uuid.uuid4().hex, delay_ms])
        if int(raw[0]) == 1:
            fence = Fence(sku_id, _s(raw[1]))
            redis().zadd(FENCES_KEY, {sku_id: fence.not_before_ms})
            fences.append(fence)
    return fences


def fences_relist(*, sku_ids: Sequence[str]) -> int:
    """List again the fences of these SKUs that are not listed (a fencer that
    died between its two calls would otherwise leave its SKU fenced for good).
    One round trip to read, one to list; returns how many were listed again."""
    fences = [Fence(s, t) for s, t in _fence_tokens(sku_ids).items() if t is not None] if sku_ids else []
    if not fences:
        return 0
    pipe = redis().pipeline(transaction=False)
    for f in fences:
        pipe.zadd(FENCES_KEY, {f.sku_id: f.not_before_ms}, nx=True)
    return sum(int(n) for n in pipe.execute())


def fence_token(*, sku_id: str) -> str | None:
    token = redis().get(sku_keys(sku_id).fence)
    return None if token is None else _s(token)


def fences_standing(*, sku_ids: Sequence[str]) -> set[str]:
    """Which of these SKUs are fenced (one round trip; none asked, none made)."""
    return {s for s, t in _fence_tokens(sku_ids).items() if t is not None} if sku_ids else set()


def fence_forget(*, sku_id: str) -> None:
    """The SKU's fence passed: it leaves the list of fences to send."""
    redis().zrem(FENCES_KEY, sku_id)


def fences_listed() -> dict[str, int]:
    """Every listed fence and when it may be sent next (ms), for the tests."""
    return {_s(m): int(score) for m, score in redis().zrange(FENCES_KEY, 0, -1, withscores=True)}


def warm_lock_acquire(*, sku_id: str) -> str | None:
    token = uuid.uuid4().hex
    if redis().set(sku_keys(sku_id).lock, token, nx=True, px=WARM_LOCK_MS):
        return token
    return None


def warm_lock_release(*, sku_id: str, token: str) -> None:
    lock = sku_keys(sku_id).lock
    _script("lock_release")(keys=[lock], args=[token])


# The registry of SKU ids MySQL has (one Cluster slot: its scripts touch all four).
SKU_REGISTRY = "seckill:{sku-registry}"
SKU_REGISTRY_COMPLETE = "seckill:{sku-registry}:complete"
SKU_REGISTRY_RECENT = "seckill:{sku-registry}:recent"
SKU_REGISTRY_SECONDS = 60
# An id added this recently survives a rebuild that read MySQL before its row
# committed; one whose create rolled back leaves at the first rebuild after.
SKU_REGISTRY_RECENT_MS = 2 * SKU_REGISTRY_SECONDS * 1000


def sku_registry_check(*, sku_id: str) -> bool | None:
    """Is this a SKU MySQL has? None when the registry is not known to be complete."""
    pipe = redis().pipeline(transaction=False)
    pipe.sismember(SKU_REGISTRY, sku_id)
    pipe.exists(SKU_REGISTRY_COMPLETE)
    member, complete = pipe.execute()
    return bool(member) if complete else None


def sku_registry_fill(*, sku_ids: Sequence[str], recent_ms: int = SKU_REGISTRY_RECENT_MS) -> int:
    """The registry becomes every SKU id MySQL has (read just before), plus the
    ids added within `recent_ms`; complete for SKU_REGISTRY_SECONDS, then read
    again. Staged in chunks, swapped in by one script. Returns its size."""
    r = redis()
    staged = f"{SKU_REGISTRY}:stage:{uuid.uuid4().hex}"
    for part in _chunks(list(sku_ids)):
        pipe = r.pipeline(transaction=False)
        pipe.sadd(staged, *part)
        pipe.expire(staged, STAGE_TTL_SECONDS)
        pipe.execute()
    return int(_script("registry_swap")(keys=[SKU_REGISTRY, staged, SKU_REGISTRY_RECENT, SKU_REGISTRY_COMPLETE],
                                        args=[recent_ms, SKU_REGISTRY_SECONDS]))


def sku_registry_add(*, sku_id: str) -> None:
    _script("registry_add")(keys=[SKU_REGISTRY, SKU_REGISTRY_RECENT], args=[sku_id, SKU_REGISTRY_RECENT_MS])


def mark_missing(*, sku_id: str) -> None:
    redis().set(sku_keys(sku_id).missing, 1, ex=MISSING_SKU_TTL_SECONDS)


def clear_missing(*, sku_id: str) -> None:
    redis().delete(sku_keys(sku_id).missing)


@dataclass(frozen=True)
class LiveStock:
    available: int
    total: int
    frozen: int
    inflight: int
    version: int


_LIVE_FIELDS = ("available", "total", "frozen", "inflight", "version")


def live_stock(*, sku_id: str) -> LiveStock | None:
    vals = redis().hmget(sku_keys(sku_id).stock, *_LIVE_FIELDS)
    return None if vals[0] is None else LiveStock(*(int(v or 0) for v in vals))


def live_stock_many(*, sku_ids: Sequence[str]) -> dict[str, LiveStock | None]:
    pipe = redis().pipeline(transaction=False)
    for sku_id in sku_ids:
        pipe.hmget(sku_keys(sku_id).stock, *_LIVE_FIELDS)
    return {sku_id: None if vals[0] is None else LiveStock(*(int(v or 0) for v in vals))
            for sku_id, vals in zip(sku_ids, pipe.execute())}


@dataclass(frozen=True)
class InflightFigures:
    reservations: int
    oldest_ms: int | None  # when the oldest reservation still in flight was accepted
    exact: bool


def inflight_figures(*, sku_ids: Sequence[str], exact_upto: int, candidates: int
                     ) -> tuple[dict[str, LiveStock | None], dict[str, InflightFigures], int]:
    """Each SKU's live stock, reservations in flight and the oldest one, and
    Redis's clock (ms), in two pipelined round trips (the live sale view). The
    oldest is exact up to `exact_upto` in flight; beyond, it is read from the
    `candidates` earliest orphan deadlines (a lower bound of the age)."""
    r = redis()
    pipe = r.pipeline(transaction=False)
    pipe.time()
    for sku_id in sku_ids:
        k = sku_keys(sku_id)
        pipe.hmget(k.stock, *_LIVE_FIELDS)
        pipe.hlen(k.inflight)
        pipe.zrange(k.due, 0, candidates - 1)
    raw = pipe.execute()
    secs, micros = raw[0]
    now_ms = int(secs) * 1000 + int(micros) // 1000
    live: dict[str, LiveStock | None] = {}
    counts: dict[str, int] = {}
    due_ids: dict[str, list] = {}
    for i, sku_id in enumerate(sku_ids):
        vals, n, due = raw[1 + 3 * i: 4 + 3 * i]
        live[sku_id] = None if vals[0] is None else LiveStock(*(int(v or 0) for v in vals))
        counts[sku_id] = int(n)
        due_ids[sku_id] = list(due)
    busy = [s for s in sku_ids if counts[s]]
    figures = {s: InflightFigures(0, None, True) for s in sku_ids}
    if busy:
        pipe = r.pipeline(transaction=False)
        for sku_id in busy:
            k = sku_keys(sku_id)
            if counts[sku_id] <= exact_upto:
                pipe.hgetall(k.inflight)
            else:
                pipe.hmget(k.inflight, due_ids[sku_id] or ["-"])
        for sku_id, got in zip(busy, pipe.execute()):
            exact = counts[sku_id] <= exact_upto
            pairs = got.items() if exact else zip(due_ids[sku_id], got)
            times = [Reservation.from_entry(sku_id, oid, e).reserved_ms for oid, e in pairs if e]
            figures[sku_id] = InflightFigures(counts[sku_id], min(times) if times else None, exact)
    return live, figures, now_ms


def ping() -> bool:
    return bool(redis().ping())


# --- Liveness of the confirm consumers ---------------------------------------------------

CONSUMERS_KEY = "seckill:consumers"  # zset identity -> last beat (ms)


def consumer_beat(*, identity: str, consuming: bool) -> None:
    now = int(time.time() * 1000)
    pipe = redis().pipeline(transaction=False)
    if consuming:
        pipe.zadd(CONSUMERS_KEY, {identity: now})
    else:
        pipe.zrem(CONSUMERS_KEY, identity)
    pipe.zremrangebyscore(CONSUMERS_KEY, "-inf", now - 3_600_000)
    pipe.execute()


def consumers_alive(*, within_s: float) -> list[str]:
    now = int(time.time() * 1000)
    return [_s(m) for m in redis().zrangebyscore(CONSUMERS_KEY, now - int(within_s * 1000), "+inf")]


# --- When each sweep last ran (the health check's "beat") -------------------------------

SWEEPS_KEY = "seckill:sweeps"  # hash task name -> last run (ms)


def sweep_ran(*, task: str) -> None:
    redis().hset(SWEEPS_KEY, task, int(time.time() * 1000))


def sweeps_last_run() -> dict[str, int]:
    return {_s(k): int(v) for k, v in redis().hgetall(SWEEPS_KEY).items()}


# Written by celery beat (seckill_site.beat): when the running beat started, and
# since when it holds each task in its schedule (set once, dropped when the task
# leaves the schedule): a sweep is not late before it could have run.
BEAT_STARTED_KEY = "seckill:beat:started"  # ms
BEAT_HELD_KEY = "seckill:beat:held"  # hash task name -> held since (ms)


def beat_schedule_held(*, tasks: Sequence[str], started: bool) -> None:
    r = redis()
    now = int(time.time() * 1000)
    gone = {_s(k) for k in r.hkeys(BEAT_HELD_KEY)} - set(tasks)
    pipe = r.pipeline(transaction=False)
    if started:
        pipe.set(BEAT_STARTED_KEY, now)
    for task in tasks:
        pipe.hsetnx(BEAT_HELD_KEY, task, now)
    if gone:
        pipe.hdel(BEAT_HELD_KEY, *gone)
    pipe.execute()


def beat_schedule_read() -> tuple[int | None, dict[str, int]]:
    """(when the running beat started, since when it holds each task), in ms."""
    pipe = redis().pipeline(transaction=False)
    pipe.get(BEAT_STARTED_KEY)
    pipe.hgetall(BEAT_HELD_KEY)
    started, held = pipe.execute()
    return (None if started is None else int(started)), {_s(k): int(v) for k, v in held.items()}
