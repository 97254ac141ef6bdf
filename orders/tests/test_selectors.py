"""orders.selectors: an order read from MySQL once confirmed and from Redis while in
flight (only ever by its buyer), and what a SKU's orders hold for its snapshot."""
from __future__ import annotations

import uuid

import pytest

from orders import selectors
from orders.models import Order
from testsupport.http import place
from testsupport.stores import confirmed


def test_an_order_in_flight_is_read_from_redis_and_only_by_its_buyer(api, make_sku, make_buyers, no_worker):
    sku = make_sku(stock=5, per_user_limit=2)
    (buyer, token), (other, other_token) = make_buyers(2)
    order_id = place(api(token), sku.sku_id, qty=2)
    assert not Order.objects.filter(pk=order_id).exists()  # nobody confirms it during the test

    view = selectors.order_get(user_id=buyer.pk, token=token, order_id=order_id)
    assert (view.order_id, view.sku_id, view.quantity, view.status) == (order_id, sku.sku_id, 2, "PROCESSING")
    assert [v.order_id for v in selectors.orders_in_flight(user_id=buyer.pk, token=token)] == [order_id]
    assert selectors.order_get(user_id=other.pk, token=other_token, order_id=order_id) is None
    assert selectors.orders_in_flight(user_id=other.pk, token=other_token) == []
    assert selectors.order_get(user_id=buyer.pk, token=token, order_id="not-an-order-id") is None


@pytest.mark.worker
def test_a_confirmed_order_is_read_from_mysql_and_its_units_and_key_are_held(api, make_sku, make_buyers, worker):
    sku = make_sku(stock=5, per_user_limit=3)
    (a, token_a), (b, token_b) = make_buyers(2)
    key = uuid.uuid4().hex
    first = place(api(token_a), sku.sku_id, key=key)
    orders = [first, place(api(token_a), sku.sku_id), place(api(token_b), sku.sku_id)]
    for order_id in orders:
        confirmed(order_id)

    view = selectors.order_get(user_id=a.pk, token=token_a, order_id=first)
    assert (view.status, view.quantity, view.confirmed_at is not None) == ("PENDING_PAYMENT", 1, True)
    assert selectors.orders_in_flight(user_id=a.pk, token=token_a) == []
    assert selectors.order_get(user_id=b.pk, token=token_b, order_id=first) is None

    holdings = selectors.sku_holdings(sku.sku_id)
    assert holdings.buyers == {a.pk: 2, b.pk: 1}
    assert holdings.idempotency[f"{a.pk}:{key}"][0] == f"{first}|1"
    assert len(holdings.idempotency) == 3
