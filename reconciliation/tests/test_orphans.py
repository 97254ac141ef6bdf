"""The orphan sweep: a reservation whose confirm message never left is found and
confirmed; one that is merely slow is not republished on every sweep; the
republished lists are bounded; one MySQL decided (confirmed, refused, undone)
that is still in flight is settled as its decision says."""
from __future__ import annotations

import json
from unittest import mock

import pytest
from django.test import override_settings

from inventory.messages import publisher
from inventory.redis import gate, live as redis_live
from orders.models import Order
from orders.services.confirm import confirm_in_mysql
from reconciliation.services import orphans_recover
from testsupport import wait_until
from testsupport.purchase import reserve_direct
from testsupport.stores import assert_balanced, settled

pytestmark = pytest.mark.mariadb_both  # again on the Galera cluster in the cluster leg


@pytest.mark.worker
def test_reservation_without_message_is_republished_and_confirmed(worker, make_sku, make_buyers):
    sku = make_sku(stock=4)
    (user, _), = make_buyers(1)
    # the web process "died" right after the Lua call: no message was published
    res = reserve_direct(sku.sku_id, user.pk)
    assert orphans_recover(sku_ids=[sku.sku_id]).republished == []  # still within its grace period
    sweep = orphans_recover(sku_ids=[sku.sku_id], ahead_s=15)
    assert sweep.republished == [res.order_id]
    wait_until(lambda: Order.objects.filter(pk=res.order_id, status=Order.Status.PENDING_PAYMENT).exists(),
               what="orphan confirmed")
    settled(sku.sku_id)
    row = assert_balanced(sku.sku_id)
    assert (row.available_stock, row.locked_stock) == (3, 1)
    assert orphans_recover(sku_ids=[sku.sku_id], ahead_s=3600).republished == []


@pytest.mark.worker
def test_broker_message_lost_after_publish_is_recovered(worker, make_sku, make_buyers, api):
    """Publish 'succeeded' but the broker lost the message: the in-flight record
    is the second copy."""
    sku = make_sku(stock=2)
    (_, token), = make_buyers(1)
    with mock.patch("inventory.messages.group_publisher.publish_confirm"):  # swallowed by a broker that then crashed
        r = api(token).post("/api/v1/orders", {"sku_id": sku.sku_id, "quantity": 1}, format="json",
                            HTTP_IDEMPOTENCY_KEY="lost")
    assert r.status_code == 202
    oid = r.json()["order_id"]
    assert orphans_recover(sku_ids=[sku.sku_id], ahead_s=15).republished == [oid]
    wait_until(lambda: Order.objects.filter(pk=oid).exists(), what="lost message recovered")
    settled(sku.sku_id)
    assert_balanced(sku.sku_id)


@pytest.mark.worker
def test_reservation_of_a_deleted_user_does_not_block_the_sku(worker, make_sku, make_buyers):
    from inventory.models import DeadLetter

    sku = make_sku(stock=3)
    (user, _), = make_buyers(1)
    ghost = reserve_direct(sku.sku_id, 10**9, key="g")
    good = reserve_direct(sku.sku_id, user.pk, key="k")
    publisher.publish_confirms([ghost, good])  # one message carrying both
    wait_until(lambda: Order.objects.filter(pk=good.order_id).exists(), what="the good reservation confirmed")
    settled(sku.sku_id)
    assert not Order.objects.filter(pk=ghost.order_id).exists()
    assert DeadLetter.objects.filter(payload__order_id=ghost.order_id).exists()
    row = assert_balanced(sku.sku_id)  # the ghost's unit went back to Redis
    assert (row.available_stock, row.locked_stock) == (2, 1)


def test_confirmed_order_still_in_flight_is_settled(make_sku, make_buyers, live_db):
    """The confirm committed but its process died before settling Redis."""
    sku = make_sku(stock=3)
    (user, _), = make_buyers(1)
    res = reserve_direct(sku.sku_id, user.pk)
    confirm_in_mysql(sku_id=sku.sku_id, batch=[res])
    assert redis_live.live_stock(sku_id=sku.sku_id).inflight == 1
    with mock.patch("inventory.messages.publisher.publish_confirms") as sent:
        sweep = orphans_recover(sku_ids=[sku.sku_id], ahead_s=15)
    assert (sweep.settled, sweep.republished) == ([res.order_id], [])
    sent.assert_called_once_with([])
    row = assert_balanced(sku.sku_id)
    assert (row.available_stock, row.locked_stock) == (2, 1)


def test_a_refused_reservation_still_in_flight_is_settled_as_its_decision_says(make_sku, make_buyers, live_db):
    """MySQL refused it for want of stock (its unit dropped, a FAILED order):
    the sweep settles it as decided, and its unit does not go back to Redis."""
    from inventory.models import Sku
    from orders.services.confirm import STOCK_REFUSAL

    sku = make_sku(stock=3)
    (user, _), = make_buyers(1)
    Sku.objects.filter(pk=sku.sku_id).update(available_stock=0, frozen_stock=3)  # MySQL will refuse
    res = reserve_direct(sku.sku_id, user.pk)
    assert confirm_in_mysql(sku_id=sku.sku_id, batch=[res]).refused[0][1] == STOCK_REFUSAL
    with mock.patch("inventory.messages.publisher.publish_confirms") as sent:
        sweep = orphans_recover(sku_ids=[sku.sku_id], ahead_s=15)
    assert (sweep.settled, sweep.republished) == ([res.order_id], [])
    sent.assert_called_once_with([])
    live = redis_live.live_stock(sku_id=sku.sku_id)
    assert (live.inflight, live.available) == (0, 2)


def test_an_undone_reservation_still_in_flight_is_settled_not_republished(make_sku, make_buyers, live_db):
    """Decided undone with no order (a refused dead-letter replay): the sweep
    reads the decision, not the orders, so it settles it and its unit returns."""
    from inventory.services.decisions import reservation_undo_record

    sku = make_sku(stock=3)
    (user, _), = make_buyers(1)
    res = reserve_direct(sku.sku_id, user.pk)
    assert reservation_undo_record(reservation=res, reason="test", actor="t") is None
    with mock.patch("inventory.messages.publisher.publish_confirms") as sent:
        sweep = orphans_recover(sku_ids=[sku.sku_id], ahead_s=15)
    assert (sweep.settled, sweep.republished) == ([res.order_id], [])
    sent.assert_called_once_with([])
    assert not Order.objects.filter(pk=res.order_id).exists()
    assert_balanced(sku.sku_id)


@override_settings(SECKILL_MESSAGE_CHUNK=50, SECKILL_ORPHAN_SWEEP_CAP=120)
def test_a_slow_backlog_is_republished_once_per_deadline_in_bounded_messages(make_sku, make_buyers, live_db):
    """Worker down: 300 reservations wait. The sweep republishes at most its cap
    per run, in messages of at most the chunk size, and a reservation it has
    republished is not republished again before its next deadline."""
    sku = make_sku(stock=300, per_user_limit=300)
    (user, _), = make_buyers(1)
    ids = {reserve_direct(sku.sku_id, user.pk).order_id for _ in range(300)}
    bodies: list[bytes] = []

    def capture(body, headers, **_kw):
        bodies.append(body)

    with mock.patch("inventory.messages.publisher.send", side_effect=capture):
        runs = [orphans_recover(sku_ids=[sku.sku_id], ahead_s=15).republished for _ in range(4)]
        again = orphans_recover(sku_ids=[sku.sku_id], ahead_s=15).republished
        later = orphans_recover(sku_ids=[sku.sku_id], ahead_s=40).republished
    assert [len(r) for r in runs] == [120, 120, 60, 0]
    assert set().union(*runs) == ids  # each once
    assert again == []  # nothing is due again before its next deadline
    assert len(later) == 120  # ... and then each is, at most the cap at a time
    sizes = [len(json.loads(b)["r"]) for b in bodies]
    assert max(sizes) == 50 and sum(sizes) == 420
    for oid in ids:
        gate.undo(sku_id=sku.sku_id, order_id=oid)


def test_an_ended_sku_with_reservations_in_flight_is_still_swept(make_sku, make_buyers, live_db):
    from inventory.models import Sku
    from inventory.selectors import sku_ids_sweepable
    from inventory.services.skus import sku_update

    sku, idle = make_sku(stock=3), make_sku(stock=3)
    (user, _), = make_buyers(1)
    res = reserve_direct(sku.sku_id, user.pk)
    for s in (sku, idle):
        sku_update(sku_id=s.sku_id, actor="t", status=Sku.Status.ENDED)
    swept = sku_ids_sweepable()
    assert sku.sku_id in swept and idle.sku_id not in swept
    with mock.patch("inventory.messages.publisher.publish_confirms") as sent:
        assert orphans_recover(sku_ids=[sku.sku_id, idle.sku_id], ahead_s=15).republished == [res.order_id]
    assert res.order_id in [r.order_id for call in sent.call_args_list for r in call.args[0]]
    gate.undo(sku_id=sku.sku_id, order_id=res.order_id)
