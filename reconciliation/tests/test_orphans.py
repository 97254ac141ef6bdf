"""A reservation whose confirm message never left (web died after the Lua call)
is found by the orphan sweep and confirmed; a confirmed one still in flight is settled."""
from __future__ import annotations

import uuid

import pytest

from conftest import wait_until
from inventory import redis_store
from inventory.tests.helpers import assert_balanced, settled
from orders.models import Order
from inventory.services import Reservation
from reconciliation.services import orphans_recover

pytestmark = pytest.mark.worker


def test_reservation_without_message_is_republished_and_confirmed(worker, make_sku, make_buyers):
    sku = make_sku(stock=4)
    (user, _), = make_buyers(1)
    oid = uuid.uuid4().hex
    # the web process "died" right after the Lua call: no message was published
    assert redis_store.reserve(sku_id=sku.sku_id, user_id=user.pk, quantity=1, idempotency_key="k",
                               order_id=oid).code == redis_store.OK
    assert orphans_recover(grace_seconds=3600, sku_ids=[sku.sku_id]).republished == []  # still within its grace period
    sweep = orphans_recover(grace_seconds=0, sku_ids=[sku.sku_id])
    assert sweep.republished == [oid]
    wait_until(lambda: Order.objects.filter(pk=oid, status=Order.Status.PENDING_PAYMENT).exists(),
               what="orphan confirmed")
    settled(sku.sku_id)
    row = assert_balanced(sku.sku_id)
    assert (row.available_stock, row.locked_stock) == (3, 1)
    assert orphans_recover(grace_seconds=0, sku_ids=[sku.sku_id]).republished == []


def test_broker_message_lost_after_publish_is_recovered(worker, make_sku, make_buyers, api):
    """Publish 'succeeded' but the broker lost the message (no publisher confirm on
    the web path): the in-flight record is the second copy."""
    from unittest import mock

    sku = make_sku(stock=2)
    (_, token), = make_buyers(1)
    with mock.patch("inventory.tasks.publish_confirm"):  # swallowed by a broker that then crashed
        r = api(token).post("/api/v1/orders", {"sku_id": sku.sku_id, "quantity": 1}, format="json",
                            HTTP_IDEMPOTENCY_KEY="lost")
    assert r.status_code == 202
    oid = r.json()["order_id"]
    assert orphans_recover(grace_seconds=0, sku_ids=[sku.sku_id]).republished == [oid]
    wait_until(lambda: Order.objects.filter(pk=oid).exists(), what="lost message recovered")
    settled(sku.sku_id)
    assert_balanced(sku.sku_id)


def test_reservation_of_a_deleted_user_does_not_block_the_sku(worker, make_sku, make_buyers):
    from inventory.models import DeadLetter
    from inventory.tasks import publish_confirms

    sku = make_sku(stock=3)
    (user, _), = make_buyers(1)
    ghost, good = uuid.uuid4().hex, uuid.uuid4().hex
    redis_store.reserve(sku_id=sku.sku_id, user_id=10**9, quantity=1, idempotency_key="g", order_id=ghost)
    redis_store.reserve(sku_id=sku.sku_id, user_id=user.pk, quantity=1, idempotency_key="k", order_id=good)
    publish_confirms([Reservation.from_inflight(sku.sku_id, e) for e in redis_store.inflight_entries(sku_id=sku.sku_id)])
    wait_until(lambda: Order.objects.filter(pk=good).exists(), what="the good reservation confirmed")
    settled(sku.sku_id)
    assert not Order.objects.filter(pk=ghost).exists()
    assert DeadLetter.objects.filter(payload__order_id=ghost).exists()
    row = assert_balanced(sku.sku_id)  # the ghost's unit went back to Redis
    assert (row.available_stock, row.locked_stock) == (2, 1)


def test_confirmed_order_still_in_flight_is_settled(make_sku, make_buyers, live_db):
    """The confirm committed but its process died before settling Redis."""
    from inventory.services import _confirm_batch_in_mysql

    sku = make_sku(stock=3)
    (user, _), = make_buyers(1)
    oid = uuid.uuid4().hex
    redis_store.reserve(sku_id=sku.sku_id, user_id=user.pk, quantity=1, idempotency_key="k", order_id=oid)
    _confirm_batch_in_mysql(sku_id=sku.sku_id, batch=[Reservation(oid, sku.sku_id, user.pk, 1, "k", 0)])
    assert redis_store.live_stock(sku_id=sku.sku_id).inflight == 1
    sweep = orphans_recover(grace_seconds=0, sku_ids=[sku.sku_id])
    assert (sweep.settled, sweep.republished) == ([oid], [])
    row = assert_balanced(sku.sku_id)
    assert (row.available_stock, row.locked_stock) == (2, 1)
