"""A SKU's snapshot in Redis: loading it (staged, then moved into place by one
script), dropping it, the fences that hold back the rebuild of a lost one
behind the confirm queue, the warm lock, the registry of SKU ids MySQL has and
the marker of an id it has not. Key names and return codes: `keys`."""
from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from accounts import token_cache
from core.redis.connection import redis
from core.redis.keys import prefix
from core.redis.shards import Shard
from inventory.domain import ClaimsFence, Fence, SkuFence, fence_name, fence_named
from inventory.redis.keys import (
    DISTRUST_LUA,
    DROP_ENDED_LUA,
    FENCE_LUA,
    FENCES_DUE_LUA,
    FENCES_KEY,
    LOCK_RELEASE_LUA,
    REBUILD_LUA,
    REGISTRY_ADD_LUA,
    REGISTRY_SWAP_LUA,
    SCRIPT_CHUNK,
    SKU_REGISTRY,
    SKU_REGISTRY_COMPLETE,
    SKU_REGISTRY_RECENT,
    STAGE_TTL_SECONDS,
    WARM_LUA,
    WARM_STAGE_LUA,
    Distrust,
    Drop,
    FenceRaise,
    Load,
    Rebuild,
    _chunks,
    _s,
    sku_keys,
)

MISSING_SKU_TTL_SECONDS = 30
WARM_LOCK_MS = 5000


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
    unit_price: str = "0.00"  # decimal text (inventory.domain.price_text)


def snapshot_exists(*, sku_id: str) -> bool:
    return bool(redis().exists(sku_keys(sku_id).stock))


def snapshot_load(*, sku_id: str, snapshot: Snapshot, fence: str = "") -> Load:
    """Write the snapshot unless one is there already (and, for a rebuild behind
    a fence, only while that fence stands; loading clears it).

    The parts are staged in bounded chunks, then moved into place by one script,
    so the gate never sees half a snapshot."""
    k = sku_keys(sku_id)
    stage = k.stage(uuid.uuid4().hex)
    buyers = [x for pair in snapshot.buyers.items() for x in pair]
    idem = [x for field, (value, ms) in snapshot.idempotency.items() for x in (field, value, ms)]
    for kind, flat, width in (("b", buyers, 2), ("i", idem, 3), ("a", list(snapshot.applied_ops), 1)):
        for part in _chunks(flat, SCRIPT_CHUNK * width):
            WARM_STAGE_LUA.run(stage, kind=kind, ttl_s=STAGE_TTL_SECONDS, items=part)
    s = snapshot
    return Load(int(WARM_LUA.run(
        k, stage, available=s.available, total=s.total, frozen=s.frozen, epoch=s.epoch, version=s.version,
        per_user_limit=s.per_user_limit, starts_ms=s.starts_ms, ends_ms=s.ends_ms, status=s.status,
        unit_price=s.unit_price, fence_token=fence)))


def snapshot_drop_ended(*, sku_id: str, epoch: int, lock_token: str, grace_ms: int) -> Drop:
    """Drop every key of an ended SKU at once, where nothing could need them
    (see drop_ended.lua; the caller holds the warm lock and marks MySQL after)."""
    return Drop(int(DROP_ENDED_LUA.run(sku_keys(sku_id), epoch=epoch, lock_token=lock_token, grace_ms=grace_ms)))


def snapshot_drop_if_idle(*, sku_id: str) -> bool:
    return Rebuild(int(REBUILD_LUA.run(sku_keys(sku_id)))) is Rebuild.DROPPED


# --- Fences: a lost snapshot is rebuilt behind the broker --------------------------------

# A fence message lost (broker restarted before it was stored) is sent again after this.
FENCE_AGAIN_MS = 5000


@dataclass(frozen=True)
class StandingFence:
    """A fence raised and not passed yet, with the token of that raising."""

    fence: Fence
    token: str  # "<id>|<not before, ms>"

    @property
    def not_before_ms(self) -> int:
        return int(self.token.rsplit("|", 1)[1])


def fence_raise(*, sku_id: str, delay_ms: int) -> StandingFence | None:
    """Fence a SKU whose snapshot is gone (None: a snapshot is there). Idempotent:
    a SKU fenced already keeps its fence. The fence is then listed as due at
    its not-before time (listing again is harmless, so a fencer that died
    between the two calls is mended by the next)."""
    raw = FENCE_LUA.run(sku_keys(sku_id), fence_id=uuid.uuid4().hex, delay_ms=delay_ms)
    if FenceRaise(int(raw[0])) is FenceRaise.SNAPSHOT_THERE:
        return None
    standing = StandingFence(SkuFence(sku_id), _s(raw[1]))
    redis().zadd(FENCES_KEY, {fence_name(standing.fence): standing.not_before_ms}, nx=True)
    return standing


def _fence_key(fence: Fence) -> str:
    if isinstance(fence, ClaimsFence):
        return token_cache.claims_fence_key(fence.shard_tag)
    return sku_keys(fence.sku_id).fence


def _fence_tokens(fences: Sequence[Fence]) -> dict[Fence, str | None]:
    """Each fence's token, None where it does not stand (one round trip)."""
    pipe = redis().pipeline(transaction=False)
    for fence in fences:
        pipe.get(_fence_key(fence))
    return {fence: None if t is None else _s(t) for fence, t in zip(fences, pipe.execute())}


def fences_due(*, cap: int = 100) -> list[StandingFence]:
    """Fences that may be sent now (each is due again FENCE_AGAIN_MS later);
    a listed fence that does not stand any more leaves the list."""
    names = [_s(x) for x in FENCES_DUE_LUA.run(fences=FENCES_KEY, cap=cap, again_ms=FENCE_AGAIN_MS)]
    if not names:
        return []
    tokens = _fence_tokens([fence_named(name) for name in names])
    gone = [fence_name(fence) for fence, token in tokens.items() if token is None]
    if gone:
        redis().zrem(FENCES_KEY, *gone)
    return [StandingFence(fence, token) for fence, token in tokens.items() if token is not None]


def _skus_with(shard: Shard, suffix: str) -> set[str]:
    """SKU ids that have a `<prefix>:{<sku>}:<suffix>` key on this shard
    (SCAN: a rare walk of its whole keyspace)."""
    head, tail = f"{prefix()}:{{", "}:" + suffix
    return {_s(k)[len(head):-len(tail)] for k in shard.scan(f"{head}*{tail}")}


def skus_held(*, shard: Shard) -> list[str]:
    """SKU ids this shard has a snapshot or a fence of (SCAN: a rare walk of
    its keyspace, for a new instance). An id read off a key name may be one
    made before the SKU-id alphabet, or not a SKU's at all: callers check it."""
    return sorted(_skus_with(shard, "stock") | _skus_with(shard, "fence"))


def snapshot_distrust(*, sku_id: str, delay_ms: int) -> StandingFence | None:
    """Drop the SKU's snapshot and fence it (distrust.lua; None: nothing of it
    was here); a fence found is replaced by one counted from now. For a new
    instance whose data may be older than what was lost."""
    raw = DISTRUST_LUA.run(sku_keys(sku_id), fence_id=uuid.uuid4().hex, delay_ms=delay_ms)
    if Distrust(int(raw[0])) is not Distrust.FENCED:
        return None
    standing = StandingFence(SkuFence(sku_id), _s(raw[1]))
    redis().zadd(FENCES_KEY, {fence_name(standing.fence): standing.not_before_ms})
    return standing


def fences_relist(*, sku_ids: Sequence[str]) -> int:
    """List again the fences of these SKUs that are not listed (a fencer that
    died between its two calls would otherwise leave its SKU fenced for good).
    One round trip to read, one to list; returns how many were listed again."""
    tokens = _fence_tokens([SkuFence(s) for s in sku_ids]) if sku_ids else {}
    standing = [StandingFence(f, t) for f, t in tokens.items() if t is not None]
    if not standing:
        return 0
    pipe = redis().pipeline(transaction=False)
    for f in standing:
        pipe.zadd(FENCES_KEY, {fence_name(f.fence): f.not_before_ms}, nx=True)
    return sum(int(n) for n in pipe.execute())


def fence_list(*, standing: StandingFence) -> None:
    """List a fence raised elsewhere (a shard's claims fence) to be sent."""
    redis().zadd(FENCES_KEY, {fence_name(standing.fence): standing.not_before_ms})


def fence_token(*, sku_id: str) -> str | None:
    token = redis().get(_fence_key(SkuFence(sku_id)))
    return None if token is None else _s(token)


def fence_stands(*, fence: Fence) -> bool:
    return bool(redis().exists(_fence_key(fence)))


def fences_standing(*, sku_ids: Sequence[str]) -> set[str]:
    """Which of these SKUs are fenced (one round trip; none asked, none made)."""
    tokens = _fence_tokens([SkuFence(s) for s in sku_ids]) if sku_ids else {}
    return {f.sku_id for f, t in tokens.items() if t is not None}


def fence_forget(*, fence: Fence) -> None:
    """The fence passed: it leaves the list of fences to send."""
    redis().zrem(FENCES_KEY, fence_name(fence))


def fences_listed() -> dict[Fence, int]:
    """Every listed fence and when it may be sent next (ms), for the tests."""
    return {fence_named(_s(m)): int(score) for m, score in redis().zrange(FENCES_KEY, 0, -1, withscores=True)}


# --- The warm lock: one load of a SKU at a time -------------------------------------------

def warm_lock_acquire(*, sku_id: str) -> str | None:
    token = uuid.uuid4().hex
    if redis().set(sku_keys(sku_id).lock, token, nx=True, px=WARM_LOCK_MS):
        return token
    return None


def warm_lock_release(*, sku_id: str, token: str) -> None:
    LOCK_RELEASE_LUA.run(sku_keys(sku_id), token=token)


# --- The registry of SKU ids MySQL has, and the marker of one it has not ------------------

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
    return int(REGISTRY_SWAP_LUA.run(registry=SKU_REGISTRY, staged=staged, recent=SKU_REGISTRY_RECENT,
                                     complete=SKU_REGISTRY_COMPLETE, recent_ms=recent_ms,
                                     complete_s=SKU_REGISTRY_SECONDS))


def sku_registry_add(*, sku_id: str) -> None:
    REGISTRY_ADD_LUA.run(registry=SKU_REGISTRY, recent=SKU_REGISTRY_RECENT, sku_id=sku_id,
                         recent_ms=SKU_REGISTRY_RECENT_MS)


def mark_missing(*, sku_id: str) -> None:
    redis().set(sku_keys(sku_id).missing, 1, ex=MISSING_SKU_TTL_SECONDS)


def clear_missing(*, sku_id: str) -> None:
    redis().delete(sku_keys(sku_id).missing)
