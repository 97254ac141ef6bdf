"""The gate's scripts against the real Redis (inventory.redis.gate): every
return code, atomicity, bounded markers."""
from __future__ import annotations

import threading
import time
import uuid

import pytest
from django.test import override_settings

from core.redis.connection import redis
from inventory.domain import Reservation
from inventory.redis import gate, keys as redis_keys, live as redis_live, snapshots as redis_snapshots
from inventory.redis.keys import Adjust, Freeze, FreezeCancel, Give, Hold, Meta, Reserve, UndoOutcome

pytestmark = pytest.mark.redis_both


def snapshot(available=5, limit=2, starts_ms=0, ends_ms=0, status="active", buyers=None, idem=None, applied=()):
    return redis_snapshots.Snapshot(available=available, total=available, frozen=0, version=1,
                                    per_user_limit=limit, starts_ms=starts_ms, ends_ms=ends_ms, status=status,
                                    buyers=buyers or {}, idempotency=idem or {}, applied_ops=tuple(applied),
                                    unit_price="4.20")


@pytest.fixture
def sku_id():
    return f"L-{uuid.uuid4().hex[:8]}"


def reserve(sku_id, user=1, qty=1, key=None, oid=None):
    return gate.reserve(sku_id=sku_id, user_id=user, quantity=qty, idempotency_key=key or uuid.uuid4().hex,
                      order_id=oid or uuid.uuid4().hex)


def test_not_warmed_then_unknown_marker(sku_id):
    assert reserve(sku_id).code is Reserve.NOT_WARMED
    redis_snapshots.mark_missing(sku_id=sku_id)
    assert reserve(sku_id).code is Reserve.UNKNOWN_SKU


def test_reserve_takes_stock_counts_buyer_and_records_in_flight(sku_id):
    assert redis_snapshots.snapshot_load(sku_id=sku_id, snapshot=snapshot(available=5, limit=3))
    r = reserve(sku_id, user=7, qty=2, key="k|with|bars", oid="a" * 32)
    assert (r.code, r.order_id, r.value, r.epoch, r.unit_price) == (Reserve.OK, "a" * 32, 3, 1, "4.20")
    assert abs(r.reserved_ms - time.time() * 1000) < 5000
    live = redis_live.live_stock(sku_id=sku_id)
    assert (live.available, live.inflight) == (3, 2)
    [entry] = gate.inflight_entries(sku_id=sku_id)
    assert entry == Reservation("a" * 32, sku_id, 7, 2, "k|with|bars", r.reserved_ms, 1, "4.20")


def test_duplicate_key_returns_first_order_and_takes_nothing(sku_id):
    redis_snapshots.snapshot_load(sku_id=sku_id, snapshot=snapshot(available=5, limit=5))
    first = reserve(sku_id, user=1, qty=1, key="same")
    again = reserve(sku_id, user=1, qty=1, key="same")
    other_body = reserve(sku_id, user=1, qty=2, key="same")
    other_user = reserve(sku_id, user=2, qty=1, key="same")
    other_case = reserve(sku_id, user=1, qty=1, key="SAME")
    assert again.code is Reserve.DUPLICATE and again.order_id == first.order_id
    assert other_body.code is Reserve.KEY_REUSED and other_body.order_id == first.order_id
    assert other_user.code is Reserve.OK
    assert other_case.code is Reserve.OK  # keys are opaque and case-sensitive
    assert redis_live.live_stock(sku_id=sku_id).available == 2


def test_sold_out_and_limit(sku_id):
    redis_snapshots.snapshot_load(sku_id=sku_id, snapshot=snapshot(available=3, limit=2))
    assert reserve(sku_id, user=1, qty=2).code is Reserve.OK
    limit = reserve(sku_id, user=1, qty=1)
    assert (limit.code, limit.value, limit.limit) == (Reserve.LIMIT_REACHED, 2, 2)
    assert reserve(sku_id, user=2, qty=2).code is Reserve.SOLD_OUT
    assert reserve(sku_id, user=2, qty=1).code is Reserve.OK
    out = reserve(sku_id, user=3, qty=1)
    assert (out.code, out.value) == (Reserve.SOLD_OUT, 0)


@pytest.mark.parametrize("kw", [{"status": "paused"}, {"starts_ms": 4102444800000}, {"ends_ms": 1000}])
def test_sale_window_and_status(sku_id, kw):
    redis_snapshots.snapshot_load(sku_id=sku_id, snapshot=snapshot(**kw))
    assert reserve(sku_id).code is Reserve.NOT_ACTIVE
    assert redis_live.live_stock(sku_id=sku_id).available == 5


def test_release_gives_everything_back_once_and_not_after_a_hold(sku_id):
    redis_snapshots.snapshot_load(sku_id=sku_id, snapshot=snapshot(available=5, limit=1))
    a = reserve(sku_id, user=1, key="ka")
    assert gate.undo(sku_id=sku_id, order_id=a.order_id) is UndoOutcome.UNDONE
    assert gate.undo(sku_id=sku_id, order_id=a.order_id) is UndoOutcome.NOTHING
    assert redis_live.live_stock(sku_id=sku_id).available == 5
    # the key and the per-user count came back: the same key can buy again...
    assert reserve(sku_id, user=1, key="ka").code is Reserve.OK
    # ...but never under the order id that was undone
    assert reserve(sku_id, user=2, key="kb", oid=a.order_id).code is Reserve.RETIRED
    b = reserve(sku_id, user=3)
    states, items = gate.hold(sku_id=sku_id, order_ids=[b.order_id])
    assert states == {b.order_id: Hold.HELD} and [i.order_id for i in items] == [b.order_id]
    assert gate.undo(sku_id=sku_id, order_id=b.order_id) is UndoOutcome.HELD
    assert gate.hold(sku_id=sku_id, order_ids=[a.order_id])[0] == {a.order_id: Hold.UNDONE}
    assert gate.hold(sku_id=sku_id, order_ids=["f" * 32])[0] == {"f" * 32: Hold.MISSING}
    gate.settle(sku_id=sku_id, confirmed=[b.order_id])
    assert gate.undo(sku_id=sku_id, order_id=b.order_id) is UndoOutcome.DONE


def test_settle_is_idempotent_and_returns_what_each_refusal_says(sku_id):
    redis_snapshots.snapshot_load(sku_id=sku_id, snapshot=snapshot(available=10, limit=1))
    ids = [reserve(sku_id, user=u).order_id for u in range(1, 7)]
    gate.hold(sku_id=sku_id, order_ids=ids)
    # ids[4] refused by MySQL for stock: buyer count back, unit not;
    # ids[5] refused for another reason: both back
    assert gate.settle(sku_id=sku_id, confirmed=ids[:4], dropped=[ids[4]], returned=[ids[5]]) == 6
    assert gate.settle(sku_id=sku_id, confirmed=ids[:4], dropped=[ids[4]], returned=[ids[5]]) == 0
    live = redis_live.live_stock(sku_id=sku_id)
    assert (live.available, live.inflight) == (5, 0)
    assert gate.hold(sku_id=sku_id, order_ids=ids[1:3])[0] == {ids[1]: Hold.DONE, ids[2]: Hold.DONE}
    assert reserve(sku_id, user=5).code is Reserve.OK  # user 5's count came back
    assert reserve(sku_id, user=6).code is Reserve.OK  # and user 6's
    assert reserve(sku_id, user=1).code is Reserve.LIMIT_REACHED


def test_hold_and_settle_take_any_number_of_ids_in_bounded_calls(sku_id):
    redis_snapshots.snapshot_load(sku_id=sku_id, snapshot=snapshot(available=1500, limit=1))
    ids = [reserve(sku_id, user=u).order_id for u in range(1, 1201)]
    states, items = gate.hold(sku_id=sku_id, order_ids=ids)
    assert set(states.values()) == {Hold.HELD} and len(items) == 1200
    assert gate.settle(sku_id=sku_id, confirmed=ids) == 1200
    assert redis_live.live_stock(sku_id=sku_id).inflight == 0


@override_settings(SECKILL_ORPHAN_GRACE_SECONDS=1)
def test_due_returns_a_slow_reservation_once_per_deadline_and_never_a_fresh_hold(sku_id):
    redis_snapshots.snapshot_load(sku_id=sku_id, snapshot=snapshot(available=10, limit=5))
    a, b = reserve(sku_id, user=1), reserve(sku_id, user=2)
    assert gate.due(sku_id=sku_id, cap=100) == []  # within their grace period
    time.sleep(0.6)
    gate.hold(sku_id=sku_id, order_ids=[b.order_id])  # a consumer took b 0.6 s after the reserve
    first = gate.due(sku_id=sku_id, cap=100, ahead_ms=500)
    assert [r.order_id for r in first] == [a.order_id]  # b's hold is younger than the grace
    # republished once: not again until its next deadline, however often the sweep runs
    assert gate.due(sku_id=sku_id, cap=100, ahead_ms=500) == []
    # a hold whose consumer died is due once its own grace has passed; a is not due yet
    later = gate.due(sku_id=sku_id, cap=100, ahead_ms=1200)
    assert [r.order_id for r in later] == [b.order_id]
    assert sorted(r.order_id for r in gate.due(sku_id=sku_id, cap=100, ahead_ms=60_000)) == sorted(
        [a.order_id, b.order_id])


def test_due_is_capped(sku_id):
    redis_snapshots.snapshot_load(sku_id=sku_id, snapshot=snapshot(available=50, limit=50))
    for u in range(30):
        reserve(sku_id, user=u)
    assert len(gate.due(sku_id=sku_id, cap=12, ahead_ms=10_500)) == 12
    assert len(gate.due(sku_id=sku_id, cap=100, ahead_ms=10_500)) == 18


def test_gives_apply_once_and_wait_for_a_snapshot(sku_id):
    assert gate.give(sku_id=sku_id, op_id="g1", quantity=2) is Give.NOT_WARM
    assert not gate.is_applied(sku_id=sku_id, op_id="g1")  # not marked: it must come again
    redis_snapshots.snapshot_load(sku_id=sku_id, snapshot=snapshot(available=5))
    assert gate.give(sku_id=sku_id, op_id="g1", quantity=2) is Give.APPLIED
    assert gate.give(sku_id=sku_id, op_id="g1", quantity=2) is Give.ALREADY
    assert redis_live.live_stock(sku_id=sku_id).available == 7


@override_settings(SECKILL_MARKER_LIFETIME_SECONDS=1, SECKILL_DONE_MARKER_SECONDS=1)
def test_markers_live_no_longer_than_their_lifetime(sku_id):
    redis_snapshots.snapshot_load(sku_id=sku_id, snapshot=snapshot(available=500, limit=500))
    k = redis_keys.sku_keys(sku_id)
    for i in range(50):
        gate.give(sku_id=sku_id, op_id=f"old-{i}", quantity=0)
        o = reserve(sku_id, user=1)
        gate.undo(sku_id=sku_id, order_id=o.order_id)
        d = reserve(sku_id, user=2)
        gate.settle(sku_id=sku_id, confirmed=[d.order_id])
    r = redis()
    assert (r.zcard(k.applied), r.zcard(k.undone), r.zcard(k.done)) == (50, 50, 50)
    time.sleep(1.1)
    gate.give(sku_id=sku_id, op_id="new", quantity=0)
    o = reserve(sku_id, user=1)
    gate.undo(sku_id=sku_id, order_id=o.order_id)
    d = reserve(sku_id, user=2)
    gate.settle(sku_id=sku_id, confirmed=[d.order_id])
    assert (r.zcard(k.applied), r.zcard(k.undone), r.zcard(k.done)) == (1, 1, 1)


@override_settings(SECKILL_IDEMPOTENCY_SECONDS=1)
def test_idempotency_records_are_trimmed_unless_their_order_is_in_flight(sku_id):
    redis_snapshots.snapshot_load(sku_id=sku_id, snapshot=snapshot(available=100, limit=100))
    k = redis_keys.sku_keys(sku_id)
    kept = reserve(sku_id, user=1, key="in-flight")
    settled = [reserve(sku_id, user=1, key=f"k{i}").order_id for i in range(5)]
    gate.settle(sku_id=sku_id, confirmed=settled)
    time.sleep(1.1)
    for i in range(5):
        reserve(sku_id, user=2, key=f"fresh{i}")
    r = redis()
    fields = {f.decode() for f in r.hkeys(k.idem)}
    assert "1:in-flight" in fields and not any(f"1:k{i}" in fields for i in range(5))
    assert reserve(sku_id, user=1, key="in-flight").order_id == kept.order_id


def test_sale_data_pushes_apply_newest_version_first(sku_id):
    redis_snapshots.snapshot_load(sku_id=sku_id, snapshot=snapshot(available=5))
    assert gate.meta_update(sku_id=sku_id, per_user_limit=3, starts_ms=0, ends_ms=0, status="active",
                          version=3, unit_price="5.00") is Meta.UPDATED
    assert reserve(sku_id).unit_price == "5.00"  # the price reaches the reserve with the rest
    assert gate.meta_update(sku_id=sku_id, per_user_limit=3, starts_ms=0, ends_ms=0, status="paused",
                          version=4, unit_price="6.00") is Meta.UPDATED
    # the push of version 2 arrives late: it changes nothing
    assert gate.meta_update(sku_id=sku_id, per_user_limit=9, starts_ms=0, ends_ms=0, status="active",
                          version=2, unit_price="1.00") is Meta.STALE
    assert reserve(sku_id).code is Reserve.NOT_ACTIVE
    assert redis().hget(redis_keys.sku_keys(sku_id).stock, "price") in ("6.00", b"6.00")


def test_freeze_cancel_gives_back_a_take_or_blocks_a_late_one(sku_id):
    redis_snapshots.snapshot_load(sku_id=sku_id, snapshot=snapshot(available=10))
    assert gate.freeze(sku_id=sku_id, op_id="f1", quantity=4) is Freeze.TAKEN
    assert gate.freeze_cancel(sku_id=sku_id, op_id="f1", quantity=4) is FreezeCancel.GIVEN_BACK
    assert gate.freeze_cancel(sku_id=sku_id, op_id="f1", quantity=4) is FreezeCancel.RESOLVED_BEFORE
    assert redis_live.live_stock(sku_id=sku_id).available == 10
    assert gate.freeze_cancel(sku_id=sku_id, op_id="f2", quantity=3) is FreezeCancel.BLOCKED
    assert gate.freeze(sku_id=sku_id, op_id="f2", quantity=3) is Freeze.ALREADY  # the late take is blocked
    assert redis_live.live_stock(sku_id=sku_id).available == 10


def test_concurrent_reserves_never_oversell(sku_id):
    redis_snapshots.snapshot_load(sku_id=sku_id, snapshot=snapshot(available=50, limit=1000))
    codes: list[Reserve] = []
    lock = threading.Lock()

    def buyer(u):
        for _ in range(25):
            c = reserve(sku_id, user=u).code
            with lock:
                codes.append(c)

    threads = [threading.Thread(target=buyer, args=(u,)) for u in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert codes.count(Reserve.OK) == 50
    assert codes.count(Reserve.SOLD_OUT) == 150
    live = redis_live.live_stock(sku_id=sku_id)
    assert (live.available, live.inflight) == (0, 50)


def test_a_whole_lowering_that_does_not_fit_changes_nothing(sku_id):
    """A dead-letter replay takes a reservation's units again all or nothing:
    clamping at zero (as a repair does) would take fewer units than the order
    confirms in MySQL, and Redis would sell the difference twice."""
    redis_snapshots.snapshot_load(sku_id=sku_id, snapshot=snapshot(available=2))
    assert gate.adjust_available(sku_id=sku_id, repair_id="r1", delta=-3, whole=True) == Adjust.REFUSED
    assert redis_live.live_stock(sku_id=sku_id).available == 2
    assert not gate.is_applied(sku_id=sku_id, op_id="r1")  # refused: a later try is not blocked
    assert gate.adjust_available(sku_id=sku_id, repair_id="r1", delta=-2, whole=True) == 0
    assert gate.adjust_available(sku_id=sku_id, repair_id="r1", delta=-2, whole=True) is None  # once
    assert gate.adjust_available(sku_id=sku_id, repair_id="r2", delta=-3) == 0  # a repair clamps
