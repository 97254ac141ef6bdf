"""The confirm's decision as a pure function: no server involved."""
from __future__ import annotations

from inventory.domain import Reservation
from orders.services.confirm import (
    CLOSED_REFUSAL,
    KEY_REFUSAL,
    LIMIT_REFUSAL,
    STALE_REFUSAL,
    STOCK_REFUSAL,
    SaleState,
    decide,
)


def r(oid, user=1, qty=1, key=None, ms=1000):
    return Reservation(oid, "S", user, qty, key or f"k-{oid}", ms)


def sale(available=10, limit=5, **kw):
    return SaleState(available=available, per_user_limit=limit, status=kw.pop("status", "active"), **kw)


def run(batch, *, decided=None, keys=(), held=None, state=None):
    return decide(batch=batch, decided=decided or {}, keys_taken=set(keys), held=held or {}, sale=state or sale())


def test_accepts_in_the_order_the_gate_did_until_stock_runs_out():
    d = run([r("c", user=3, ms=3), r("a", user=1, ms=1), r("b", user=2, qty=2, ms=2)], state=sale(available=3))
    assert [x.order_id for x in d.accepted] == ["a", "b"]
    assert [(x.order_id, why) for x, why in d.refused] == [("c", STOCK_REFUSAL)]
    assert d.settle_dropped == ["c"] and d.settle_returned == []


def test_reservations_decided_before_follow_their_decision_and_take_nothing():
    d = run([r("a"), r("b"), r("c"), r("d"), r("e")],
            decided={"a": "confirmed", "b": "dropped", "c": "returned", "d": "undone"})
    assert [x.order_id for x in d.accepted] == ["e"]
    assert (d.confirmed_before, d.dropped_before, d.returned_before, d.undone_before) == (["a"], ["b"], ["c"], ["d"])
    assert sorted(d.settle_confirmed) == ["a", "e"]
    assert d.settle_dropped == ["b"] and sorted(d.settle_returned) == ["c", "d"]


def test_a_key_already_used_and_the_per_user_limit_are_refused_with_their_units_back():
    d = run([r("a", user=1, key="K"), r("b", user=2, qty=2, ms=2), r("c", user=2, qty=2, ms=3)],
            keys={(1, "K")}, held={2: 1}, state=sale(limit=3))
    assert [x.order_id for x in d.accepted] == ["b"]
    assert {x.order_id: why for x, why in d.refused} == {"a": KEY_REFUSAL, "c": LIMIT_REFUSAL}
    assert sorted(d.settle_returned) == ["a", "c"]


def test_the_same_key_twice_in_one_batch_makes_one_order():
    d = run([r("a", key="K", ms=1), r("b", key="K", ms=2)])
    assert [x.order_id for x in d.accepted] == ["a"]
    assert d.refused[0][0].order_id == "b" and d.refused[0][1] == KEY_REFUSAL


def test_keys_are_compared_exactly():
    d = run([r("a", key="Key-abc"), r("b", key="KEY-ABC", ms=2), r("c", key="key-abc", ms=3)])
    assert len(d.accepted) == 3


def test_a_duplicate_delivery_in_one_batch_counts_once():
    d = run([r("a"), r("a")])
    assert len(d.accepted) == 1 and not d.refused


def test_a_sale_paused_or_ended_refuses_what_the_gate_accepted_after_it():
    paused = sale(status="paused", status_changed_ms=2000)
    d = run([r("before", ms=1999), r("after", ms=2000)], state=paused)
    assert [x.order_id for x in d.accepted] == ["before"]
    assert d.refused == [(r("after", ms=2000), CLOSED_REFUSAL)]
    ended = sale(ends_ms=5000, starts_ms=100)
    d = run([r("early", ms=50), r("in", ms=4999), r("late", ms=5000)], state=ended)
    assert [x.order_id for x in d.accepted] == ["in"]
    assert {x.order_id for x, _ in d.refused} == {"early", "late"}


def test_a_reservation_of_a_lost_redis_reaching_the_confirm_after_the_rebuild_is_refused():
    """Epoch 1's Redis was lost and the SKU rebuilt as epoch 2 behind its fence:
    a reservation of epoch 1 arriving now was not counted by the rebuild (its
    request got no 202), so it takes nothing and Redis gets no unit back."""
    old = Reservation("a", "S", 1, 1, "k-a", 1000, 1)
    new = Reservation("b", "S", 2, 1, "k-b", 2000, 2)
    d = run([old, new], state=sale(available=1, epoch=2))
    assert [x.order_id for x in d.accepted] == ["b"]
    assert [(x.order_id, why) for x, why in d.refused] == [("a", STALE_REFUSAL)]
    assert d.settle_dropped == ["a"] and d.settle_returned == []
    # before any rebuild the same reservation is an order
    assert [x.order_id for x in run([old], state=sale(available=1, epoch=1)).accepted] == ["a"]

