"""A capture pays only what the order costs, and only an order MySQL has:
one whose amount or currency differs is a refund to make (amount_mismatch),
one the gate still holds in flight is answered 409 not_yet with Retry-After
(nothing recorded, the provider's retry pays it), and a payment id recorded as
a refund never pays another order. Real MariaDB, Redis, RabbitMQ and worker."""
from __future__ import annotations

import uuid
from decimal import Decimal
from unittest import mock

import pytest

from core.redis.errors import RedisError
from orders.models import Order, PaymentRefund
from testsupport.payments import PRICE, capture, hook
from testsupport.purchase import publish, reserve_direct
from testsupport.stores import assert_balanced, confirmed, moves_applied

pytestmark = [pytest.mark.worker, pytest.mark.mariadb_both]


def pid() -> str:
    return f"pay_{uuid.uuid4().hex}"


@pytest.mark.parametrize(("amount", "currency"), [("12.49", "CNY"), ("12.51", "CNY"), ("0", "CNY"), (1250, "CNY"),
                                                  ("12.50", "USD"), (12.5, "EUR")])
def test_a_capture_of_another_amount_or_currency_pays_nothing_and_is_a_refund(pending, webhook_on, amount,
                                                                              currency):
    sku, [(oid, _)] = pending(1)
    p = pid()
    for _ in range(2):  # the provider's retry records nothing more
        r = hook(capture(oid, p, amount=amount, currency=currency))
        assert r.status_code == 200, r.content
        assert (r.json()["outcome"], r.json()["refund_reason"]) == ("refund_recorded", "amount_mismatch")
    order = Order.objects.get(pk=oid)
    assert (order.status, order.payment_id) == (Order.Status.PENDING_PAYMENT, None)
    refund = PaymentRefund.objects.get(payment_id=p)
    # what goes back is what was taken
    assert (refund.order_id, refund.amount, refund.currency) == (oid, Decimal(str(amount)), currency)
    moves_applied(sku.sku_id)
    row = assert_balanced(sku.sku_id)
    assert (row.locked_stock, row.sold_stock) == (1, 0)


@pytest.mark.parametrize(("amount", "currency"), [("12.50", "CNY"), ("12.5", "cny"), (12.5, "CNY"), ("12.50", "Cny")])
def test_the_orders_amount_in_any_spelling_pays_it(pending, webhook_on, amount, currency):
    sku, [(oid, _)] = pending(1)
    r = hook(capture(oid, pid(), amount=amount, currency=currency))
    assert r.status_code == 200 and r.json()["outcome"] == "paid", r.content


@pytest.mark.parametrize(("field", "value"), [("amount", "-1"), ("amount", "1.001"), ("amount", "1e3"),
                                              ("amount", None), ("amount", True), ("currency", "CN"),
                                              ("currency", "C1Y"), ("currency", None)])
def test_a_capture_without_a_valid_amount_and_currency_is_400_and_records_nothing(pending, webhook_on, field,
                                                                                  value):
    sku, [(oid, _)] = pending(1)
    p = pid()
    r = hook(capture(oid, p, **{field: value}))
    assert r.status_code == 400 and r.json()["code"] == "invalid" and field in r.json()["errors"], r.content
    assert Order.objects.get(pk=oid).status == Order.Status.PENDING_PAYMENT
    assert not PaymentRefund.objects.filter(payment_id=p).exists()


def test_a_capture_before_the_confirm_is_not_yet_and_pays_once_confirmed(make_sku, make_buyers, webhook_on,
                                                                        worker):
    """The gate took the unit (the 202), the confirm is not in MySQL yet: its
    message is published only after the captures arrive."""
    sku = make_sku(stock=2, price=PRICE)
    (user, _), = make_buyers(1)
    r = reserve_direct(sku.sku_id, user.pk)
    p = pid()
    for _ in range(2):
        early = hook(capture(r.order_id, p))
        assert early.status_code == 409 and early.json()["code"] == "not_yet", early.content
        assert int(early["Retry-After"]) >= 1
    assert not PaymentRefund.objects.filter(payment_id=p).exists()
    assert not Order.objects.filter(pk=r.order_id).exists()
    publish(r)
    confirmed(r.order_id)
    paid = hook(capture(r.order_id, p))
    assert paid.status_code == 200 and paid.json()["outcome"] == "paid", paid.content
    assert Order.objects.get(pk=r.order_id).payment_id == p


def test_a_capture_that_meets_redis_away_for_an_unknown_order_is_503_and_records_nothing(webhook_on, live_db):
    p = pid()
    with mock.patch("inventory.redis.gate.inflight_find", side_effect=RedisError("Redis is away")):
        r = hook(capture(uuid.uuid4().hex, p))
    assert r.status_code == 503 and r.json()["code"] == "unavailable", r.content
    assert not PaymentRefund.objects.filter(payment_id=p).exists()


def test_an_order_id_no_store_knows_is_still_an_unknown_order(webhook_on, make_sku, live_db):
    sku = make_sku(stock=1)
    from orders.services.place import order_id_new
    oid = order_id_new(sku_id=sku.sku_id)  # the SKU's tag, never reserved
    r = hook(capture(oid, pid()))
    assert r.status_code == 200 and r.json()["refund_reason"] == "unknown_order", r.content


def test_a_payment_id_recorded_as_a_refund_pays_no_other_order(pending, webhook_on, api):
    sku, [(cancelled, client), (payable, other)] = pending(2, stock=3)
    assert client.post(f"/api/v1/orders/{cancelled}/cancel").status_code == 200
    p = pid()
    assert hook(capture(cancelled, p)).json()["refund_reason"] == "order_cancelled"
    # the same money named for another order: nothing paid, nothing more recorded
    for _ in range(2):
        r = hook(capture(payable, p))
        assert r.status_code == 200, r.content
        assert (r.json()["outcome"], r.json()["refund_reason"]) == ("refund_recorded", "payment_id_reused")
    # nor through the buyer's own pay with that id
    r = other.post(f"/api/v1/orders/{payable}/pay", {"payment_id": p}, format="json")
    assert r.status_code == 409 and r.json()["code"] == "payment_id_reused", r.content
    assert Order.objects.get(pk=payable).status == Order.Status.PENDING_PAYMENT
    assert list(PaymentRefund.objects.filter(payment_id=p).values_list("order_ref", flat=True)) == [cancelled]
    # the order still pays with a payment of its own
    assert hook(capture(payable, pid())).json()["outcome"] == "paid"
