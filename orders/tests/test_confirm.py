"""The confirm consumer against the real worker: idempotent, refuses what MySQL lacks,
never executes a forged message."""
from __future__ import annotations

import pytest
from django.conf import settings
from kombu import Connection, Producer

from core.redis.connection import redis
from inventory.messages import encoding, names, queues
from inventory.models import DeadLetter, InventoryLog, Sku
from inventory.redis import gate, keys as redis_keys, live as redis_live
from orders.models import Order
from testsupport import wait_until
from testsupport.purchase import publish, reserve_direct
from testsupport.stores import assert_balanced, decr_log_by_order, settled

pytestmark = [pytest.mark.worker, pytest.mark.redis_both]


def test_message_delivered_twice_confirms_once(worker, make_sku, make_buyers):
    sku = make_sku(stock=5, per_user_limit=2)
    (user, _), = make_buyers(1)
    res = reserve_direct(sku.sku_id, user.pk, 2)
    publish(res, res)
    wait_until(lambda: Order.objects.filter(pk=res.order_id).exists(), what="order row")
    settled(sku.sku_id)
    # a third delivery after everything settled, and after Redis forgot it was done
    redis().delete(redis_keys.sku_keys(sku.sku_id).done)
    publish(res)
    wait_until(lambda: gate.is_settled(sku_id=sku.sku_id, order_id=res.order_id), what="re-settled")
    sku = assert_balanced(sku.sku_id)
    assert (sku.available_stock, sku.locked_stock) == (3, 2)
    assert Order.objects.filter(sku_id=sku.sku_id).count() == 1
    assert decr_log_by_order(sku.sku_id) == {res.order_id: InventoryLog.Status.PENDING}


def test_mysql_refusal_fails_the_order_and_returns_only_the_buyer_count(worker, make_sku, make_buyers):
    sku = make_sku(stock=2, per_user_limit=1)
    (u1, _), (u2, _) = make_buyers(2)
    # Redis above the truth: MySQL has 1 unit fewer than Redis believes
    Sku.objects.filter(pk=sku.sku_id).update(available_stock=1, frozen_stock=1)
    a, b = reserve_direct(sku.sku_id, u1.pk), reserve_direct(sku.sku_id, u2.pk)
    publish(a, b)
    wait_until(lambda: Order.objects.filter(sku_id=sku.sku_id).count() == 2, what="two order rows")
    settled(sku.sku_id)
    statuses = sorted(Order.objects.filter(sku_id=sku.sku_id).values_list("status", flat=True))
    assert statuses == [Order.Status.FAILED, Order.Status.PENDING_PAYMENT]
    failed = Order.objects.get(sku_id=sku.sku_id, status=Order.Status.FAILED)
    assert failed.failure_reason == "insufficient_stock"
    row = Sku.objects.get(pk=sku.sku_id)
    assert (row.available_stock, row.locked_stock, row.frozen_stock) == (0, 1, 1)
    # the unit did not come back to Redis (it would fail again); the buyer's count did
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 0
    buyers = redis().hgetall(redis_keys.sku_keys(sku.sku_id).buyers)
    assert str(failed.user_id).encode() not in buyers
    assert decr_log_by_order(sku.sku_id)[failed.order_id] == InventoryLog.Status.FAIL


def _publish_raw(body: bytes, headers: dict) -> None:
    queue = queues.confirm_queue()
    with Connection(settings.CELERY_BROKER_URL, transport_options={"confirm_publish": True}) as conn:
        Producer(conn.channel(), exchange=queue.exchange, routing_key=queue.routing_key).publish(
            body, content_type="application/json", content_encoding="utf-8", headers=headers, delivery_mode=2)


def test_forged_or_malformed_messages_are_never_executed(worker, make_sku, make_buyers):
    sku = make_sku(stock=3)
    (user, _), = make_buyers(1)
    res = reserve_direct(sku.sku_id, user.pk)
    body, headers = encoding.confirm_encode([res])
    before = DeadLetter.objects.count()
    _publish_raw(body, {**headers, names.SIGNATURE_HEADER: "0" * 64})  # forged signature
    tampered = body.replace(b',1,', b',3,', 1)  # quantity changed after signing
    _publish_raw(tampered, headers)
    _publish_raw(b'{"v":1,"r":[["x"]]}', {})  # unsigned, malformed
    wait_until(lambda: DeadLetter.objects.count() >= before + 3, what="three refused messages set aside")
    assert not Order.objects.filter(pk=res.order_id).exists()
    reasons = list(DeadLetter.objects.order_by("-pk").values_list("reason", flat=True)[:3])
    assert all(r.startswith("refused:") for r in reasons), reasons
    publish(res)
    wait_until(lambda: Order.objects.filter(pk=res.order_id).exists(), what="genuine message confirmed")


def test_confirm_queue_has_one_active_consumer_a_delivery_limit_and_a_dead_letter_exchange(worker):
    q = rabbitmq_queue_args()
    assert q["x-queue-type"] == "quorum" and q["x-single-active-consumer"] is True
    assert q["x-delivery-limit"] == settings.SECKILL_CONFIRM_DELIVERY_LIMIT
    assert q["x-dead-letter-exchange"] == settings.CELERY_DEAD_LETTER.exchange.name


def rabbitmq_queue_args() -> dict:
    from testsupport.stores import rabbitmq_queue

    q = rabbitmq_queue(settings.SECKILL_CONFIRM_QUEUE)
    return {a[0]: a[-1] for a in q["arguments"]}
