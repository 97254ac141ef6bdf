"""Snapshots, fences and the warm lock against the real Redis
(inventory.redis.snapshots): every return code of their scripts."""
from __future__ import annotations

import time
import uuid

import pytest

from core.redis.connection import redis
from inventory.domain import ClaimsFence, SkuFence
from inventory.redis import gate, keys as redis_keys, live as redis_live, snapshots as redis_snapshots
from inventory.redis.keys import FENCES_KEY, Load, Reserve

pytestmark = pytest.mark.redis_both


def snapshot(available=5, limit=2, buyers=None, idem=None, applied=()):
    return redis_snapshots.Snapshot(available=available, total=available, frozen=0, version=1,
                                    per_user_limit=limit, starts_ms=0, ends_ms=0, status="active",
                                    buyers=buyers or {}, idempotency=idem or {}, applied_ops=tuple(applied))


@pytest.fixture
def sku_id():
    return f"L-{uuid.uuid4().hex[:8]}"


def reserve(sku_id, user=1, key=None):
    return gate.reserve(sku_id=sku_id, user_id=user, quantity=1, idempotency_key=key or uuid.uuid4().hex,
                        order_id=uuid.uuid4().hex)


def test_warm_never_overwrites_a_live_snapshot(sku_id):
    assert redis_snapshots.snapshot_load(sku_id=sku_id, snapshot=snapshot(available=5)) is Load.LOADED
    reserve(sku_id)
    assert redis_snapshots.snapshot_load(sku_id=sku_id, snapshot=snapshot(available=5)) is Load.THERE
    assert redis_live.live_stock(sku_id=sku_id).available == 4


def test_a_large_snapshot_is_loaded_in_bounded_chunks(sku_id):
    buyers = dict.fromkeys(range(1, 1301), 1)
    idem = {f"{u}:k{u}": (f"{u:032x}|1", int(time.time() * 1000)) for u in range(1, 1301)}
    assert redis_snapshots.snapshot_load(sku_id=sku_id, snapshot=snapshot(
        available=10, limit=1, buyers=buyers, idem=idem, applied=[f"op{i}" for i in range(700)]))
    k = redis_keys.sku_keys(sku_id)
    r = redis()
    assert (r.hlen(k.buyers), r.hlen(k.idem), r.zcard(k.applied)) == (1300, 1300, 700)
    assert reserve(sku_id, user=5).code is Reserve.LIMIT_REACHED
    dup = reserve(sku_id, user=7, key="k7")
    assert (dup.code, dup.order_id) == (Reserve.DUPLICATE, f"{7:032x}")
    assert not list(r.keys(f"{k.tag}:stage:*"))  # staging keys moved into place


def test_a_fence_is_raised_once_only_where_the_snapshot_is_gone_and_a_load_passes_only_it(sku_id):
    redis_snapshots.snapshot_load(sku_id=sku_id, snapshot=snapshot())
    assert redis_snapshots.fence_raise(sku_id=sku_id, delay_ms=0) is None  # a snapshot is there
    redis().delete(redis_keys.sku_keys(sku_id).stock)
    fence = redis_snapshots.fence_raise(sku_id=sku_id, delay_ms=0)
    assert fence is not None and redis_snapshots.fence_raise(sku_id=sku_id, delay_ms=0) == fence  # already
    assert reserve(sku_id).code is Reserve.FENCED
    assert redis_snapshots.snapshot_load(sku_id=sku_id, snapshot=snapshot(), fence="another") is Load.NOT_FENCE
    assert redis_snapshots.snapshot_load(sku_id=sku_id, snapshot=snapshot(), fence=fence.token) is Load.LOADED
    assert redis_snapshots.fence_token(sku_id=sku_id) is None  # loading cleared it
    assert SkuFence(sku_id) in redis_snapshots.fences_listed()
    redis_snapshots.fence_forget(fence=SkuFence(sku_id))
    assert SkuFence(sku_id) not in redis_snapshots.fences_listed()


def test_a_claims_fence_is_listed_under_the_name_every_version_reads():
    """The list of fences to send names a shard's claims fence
    "@claims:<shard tag>", as an earlier version listed it: one listed then
    is read as the claims fence, and one listed now reads there."""
    tag = f"t{uuid.uuid4().hex[:6]}"
    fence = ClaimsFence(tag)
    redis_snapshots.fence_list(standing=redis_snapshots.StandingFence(fence, "x|5"))
    try:
        assert redis().zscore(FENCES_KEY, f"@claims:{tag}") == 5
        assert redis_snapshots.fences_listed()[fence] == 5
        assert SkuFence(f"@claims:{tag}") not in redis_snapshots.fences_listed()
    finally:
        redis_snapshots.fence_forget(fence=fence)
    assert redis().zscore(FENCES_KEY, f"@claims:{tag}") is None


def test_a_snapshot_is_dropped_for_a_rebuild_only_while_nothing_is_in_flight(sku_id):
    redis_snapshots.snapshot_load(sku_id=sku_id, snapshot=snapshot())
    r = reserve(sku_id)
    assert redis_snapshots.snapshot_drop_if_idle(sku_id=sku_id) is False
    assert gate.undo(sku_id=sku_id, order_id=r.order_id)
    assert redis_snapshots.snapshot_drop_if_idle(sku_id=sku_id) is True
    assert not redis_snapshots.snapshot_exists(sku_id=sku_id)


def test_the_warm_lock_is_released_only_by_its_holder(sku_id):
    token = redis_snapshots.warm_lock_acquire(sku_id=sku_id)
    assert token and redis_snapshots.warm_lock_acquire(sku_id=sku_id) is None
    redis_snapshots.warm_lock_release(sku_id=sku_id, token="not-the-holder")
    assert redis_snapshots.warm_lock_acquire(sku_id=sku_id) is None  # still held
    redis_snapshots.warm_lock_release(sku_id=sku_id, token=token)
    assert redis_snapshots.warm_lock_acquire(sku_id=sku_id) is not None

