"""The Lua scripts against the real Redis: every return code, and atomicity."""
from __future__ import annotations

import threading
import uuid

import pytest

from inventory import redis_store as rs


def snapshot(available=5, limit=2, starts_ms=0, ends_ms=0, status="active", buyers=None, idem=None):
    return rs.Snapshot(available=available, total=available, frozen=0, version=1, per_user_limit=limit,
                       starts_ms=starts_ms, ends_ms=ends_ms, status=status, buyers=buyers or {},
                       idempotency=idem or {})


@pytest.fixture
def sku_id():
    return f"L-{uuid.uuid4().hex[:8]}"


def reserve(sku_id, user=1, qty=1, key=None, oid=None):
    return rs.reserve(sku_id=sku_id, user_id=user, quantity=qty, idempotency_key=key or uuid.uuid4().hex,
                      order_id=oid or uuid.uuid4().hex)


def test_not_warmed_then_unknown_marker(sku_id):
    assert reserve(sku_id).code == rs.NOT_WARMED
    rs.mark_missing(sku_id=sku_id)
    assert reserve(sku_id).code == rs.UNKNOWN_SKU


def test_reserve_takes_stock_counts_buyer_and_records_in_flight(sku_id):
    assert rs.snapshot_load(sku_id=sku_id, snapshot=snapshot(available=5, limit=3))
    r = reserve(sku_id, user=7, qty=2, key="k", oid="a" * 32)
    assert (r.code, r.order_id, r.value) == (rs.OK, "a" * 32, 3)
    live = rs.live_stock(sku_id=sku_id)
    assert (live.available, live.inflight) == (3, 2)
    [entry] = rs.inflight_entries(sku_id=sku_id)
    assert (entry.order_id, entry.user_id, entry.quantity, entry.idempotency_key) == ("a" * 32, 7, 2, "k")


def test_duplicate_key_returns_first_order_and_takes_nothing(sku_id):
    rs.snapshot_load(sku_id=sku_id, snapshot=snapshot(available=5, limit=5))
    first = reserve(sku_id, user=1, qty=1, key="same")
    again = reserve(sku_id, user=1, qty=1, key="same")
    other_body = reserve(sku_id, user=1, qty=2, key="same")
    other_user = reserve(sku_id, user=2, qty=1, key="same")
    assert again.code == rs.DUPLICATE and again.order_id == first.order_id
    assert other_body.code == rs.KEY_REUSED and other_body.order_id == first.order_id
    assert other_user.code == rs.OK
    assert rs.live_stock(sku_id=sku_id).available == 3


def test_sold_out_and_limit(sku_id):
    rs.snapshot_load(sku_id=sku_id, snapshot=snapshot(available=3, limit=2))
    assert reserve(sku_id, user=1, qty=2).code == rs.OK
    limit = reserve(sku_id, user=1, qty=1)
    assert (limit.code, limit.value, limit.limit) == (rs.LIMIT_REACHED, 2, 2)
    assert reserve(sku_id, user=2, qty=2).code == rs.SOLD_OUT
    assert reserve(sku_id, user=2, qty=1).code == rs.OK
    out = reserve(sku_id, user=3, qty=1)
    assert (out.code, out.value) == (rs.SOLD_OUT, 0)


@pytest.mark.parametrize("kw", [dict(status="paused"), dict(starts_ms=4102444800000), dict(ends_ms=1000)])
def test_sale_window_and_status(sku_id, kw):
    rs.snapshot_load(sku_id=sku_id, snapshot=snapshot(**kw))
    assert reserve(sku_id).code == rs.NOT_ACTIVE
    assert rs.live_stock(sku_id=sku_id).available == 5


def test_warm_never_overwrites_a_live_snapshot(sku_id):
    assert rs.snapshot_load(sku_id=sku_id, snapshot=snapshot(available=5))
    reserve(sku_id)
    assert not rs.snapshot_load(sku_id=sku_id, snapshot=snapshot(available=5))
    assert rs.live_stock(sku_id=sku_id).available == 4


def test_release_gives_everything_back_once_and_not_after_a_claim(sku_id):
    rs.snapshot_load(sku_id=sku_id, snapshot=snapshot(available=5, limit=1))
    a = reserve(sku_id, user=1, key="ka")
    assert rs.release(sku_id=sku_id, order_id=a.order_id) == rs.RELEASE_DONE
    assert rs.release(sku_id=sku_id, order_id=a.order_id) == rs.RELEASE_NOTHING
    assert rs.live_stock(sku_id=sku_id).available == 5
    # the key and the per-user count came back: the same key can buy again
    assert reserve(sku_id, user=1, key="ka").code == rs.OK
    b = reserve(sku_id, user=2)
    states, items = rs.claim(sku_id=sku_id, order_ids=[b.order_id], batch=0)
    assert states == {b.order_id: "claimed"} and [i.order_id for i in items] == [b.order_id]
    assert rs.release(sku_id=sku_id, order_id=b.order_id) == rs.RELEASE_CLAIMED
    assert rs.claim(sku_id=sku_id, order_ids=[a.order_id], batch=0)[0] == {a.order_id: "released"}
    assert rs.claim(sku_id=sku_id, order_ids=["f" * 32], batch=0)[0] == {"f" * 32: "missing"}


def test_claim_batches_others_once_and_settle_is_idempotent(sku_id):
    rs.snapshot_load(sku_id=sku_id, snapshot=snapshot(available=10, limit=1))
    ids = [reserve(sku_id, user=u).order_id for u in range(1, 6)]
    states, items = rs.claim(sku_id=sku_id, order_ids=[ids[2]], batch=10)
    assert states == {ids[2]: "claimed"}
    assert sorted(i.order_id for i in items) == sorted(ids)
    # a second consumer finds nothing left to batch
    _, again = rs.claim(sku_id=sku_id, order_ids=[ids[0]], batch=10)
    assert [i.order_id for i in again] == [ids[0]]
    # ids[4] refused by MySQL for stock: buyer count back, unit not
    assert rs.settle(sku_id=sku_id, confirmed=ids[:4], failed=[ids[4]]) == 5
    assert rs.settle(sku_id=sku_id, confirmed=ids[:4], failed=[ids[4]]) == 0
    live = rs.live_stock(sku_id=sku_id)
    assert (live.available, live.inflight) == (5, 0)
    assert rs.claim(sku_id=sku_id, order_ids=[ids[1], ids[3]], batch=10)[0] == {ids[1]: "done", ids[3]: "done"}
    assert reserve(sku_id, user=5).code == rs.OK  # user 5's count came back
    assert reserve(sku_id, user=1).code == rs.LIMIT_REACHED


def test_concurrent_reserves_never_oversell(sku_id):
    rs.snapshot_load(sku_id=sku_id, snapshot=snapshot(available=50, limit=1000))
    codes: list[int] = []
    lock = threading.Lock()

    def buyer(u):
        for _ in range(25):
            c = reserve(sku_id, user=u).code
            with lock:
                codes.append(c)

    threads = [threading.Thread(target=buyer, args=(u,)) for u in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert codes.count(rs.OK) == 50
    assert codes.count(rs.SOLD_OUT) == 150
    live = rs.live_stock(sku_id=sku_id)
    assert (live.available, live.inflight) == (0, 50)
