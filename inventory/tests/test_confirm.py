"""The confirm consumer against the real worker: idempotent, refuses what MySQL lacks."""
from __future__ import annotations

import uuid

import pytest

from conftest import wait_until
from inventory import redis_store, services, signing
from inventory.models import ConsumerDedup, InventoryLog, Sku
from inventory.tasks import confirm_reservation_task, publish_confirm
from inventory.tests.helpers import assert_balanced, decr_log_by_order, settled
from orders.models import Order

pytestmark = pytest.mark.worker


def reserve(sku_id: str, user_id: int, qty: int = 1) -> services.Reservation:
    oid, key = uuid.uuid4().hex, uuid.uuid4().hex
    r = redis_store.reserve(sku_id=sku_id, user_id=user_id, quantity=qty, idempotency_key=key, order_id=oid)
    assert r.code == redis_store.OK, r
    return services.Reservation(oid, sku_id, user_id, qty, key, 0)


def test_message_delivered_twice_confirms_once(worker, make_sku, make_buyers):
    sku = make_sku(stock=5, per_user_limit=2)
    (user, _), = make_buyers(1)
    res = reserve(sku.sku_id, user.pk, 2)
    publish_confirm(res)
    publish_confirm(res)
    wait_until(lambda: Order.objects.filter(pk=res.order_id).exists(), what="order row")
    settled(sku.sku_id)
    # a third delivery after everything settled (and after Redis forgot it was done)
    redis_store.redis().delete(redis_store.sku_keys(sku.sku_id).done)
    publish_confirm(res)
    wait_until(lambda: redis_store.is_settled(sku_id=sku.sku_id, order_id=res.order_id), what="re-settled")
    sku = assert_balanced(sku.sku_id)
    assert (sku.available_stock, sku.locked_stock) == (3, 2)
    assert Order.objects.filter(sku_id=sku.sku_id).count() == 1
    assert decr_log_by_order(sku.sku_id) == {res.order_id: InventoryLog.Status.PENDING}
    assert ConsumerDedup.objects.filter(business_id=f"{res.order_id}:confirm").count() == 1


def test_mysql_refusal_fails_the_order_and_returns_only_the_buyer_count(worker, make_sku, make_buyers):
    sku = make_sku(stock=2, per_user_limit=1)
    (u1, _), (u2, _) = make_buyers(2)
    # Redis above the truth: MySQL has 1 unit fewer than Redis believes
    Sku.objects.filter(pk=sku.sku_id).update(available_stock=1, frozen_stock=1)
    a, b = reserve(sku.sku_id, u1.pk), reserve(sku.sku_id, u2.pk)
    publish_confirm(a)
    publish_confirm(b)
    wait_until(lambda: Order.objects.filter(sku_id=sku.sku_id).count() == 2, what="two order rows")
    settled(sku.sku_id)
    statuses = sorted(Order.objects.filter(sku_id=sku.sku_id).values_list("status", flat=True))
    assert statuses == [Order.Status.FAILED, Order.Status.PENDING_PAYMENT]
    failed = Order.objects.get(sku_id=sku.sku_id, status=Order.Status.FAILED)
    assert failed.failure_reason == "insufficient_stock"
    row = Sku.objects.get(pk=sku.sku_id)
    assert (row.available_stock, row.locked_stock, row.frozen_stock) == (0, 1, 1)
    # the unit did not come back to Redis (it would fail again); the buyer's count did
    assert redis_store.live_stock(sku_id=sku.sku_id).available == 0
    buyers = redis_store.redis().hgetall(redis_store.sku_keys(sku.sku_id).buyers)
    assert str(failed.user_id).encode() not in buyers
    assert decr_log_by_order(sku.sku_id)[failed.order_id] == InventoryLog.Status.FAIL


def test_bad_signature_is_never_executed(worker, make_sku, make_buyers):
    sku = make_sku(stock=3)
    (user, _), = make_buyers(1)
    res = reserve(sku.sku_id, user.pk)
    forged = {"reservations": [res.payload()]}
    confirm_reservation_task.apply_async(args=[forged, "0" * 64])
    confirm_reservation_task.apply_async(args=[forged, signing.sign({"reservations": [dict(res.payload(), quantity=3)]})])
    from inventory.models import DeadLetter

    wait_until(lambda: DeadLetter.objects.filter(payload__args__0=forged).count() == 2,
               what="both forged messages dead-lettered")
    assert not Order.objects.filter(pk=res.order_id).exists()
    publish_confirm(res)
    wait_until(lambda: Order.objects.filter(pk=res.order_id).exists(), what="genuine message confirmed")
