"""What an order costs is recorded when it is reserved (orders.services.place,
the gate's snapshot price) and kept through the confirm: a price change after
the click moves nothing, the order body shows `amount` and `currency` from
the 202 on, and reservations or messages of before (no price) still confirm.
Real MariaDB, Redis, RabbitMQ and a real worker."""
from __future__ import annotations

import json
from decimal import Decimal

import pytest

from inventory import signing
from inventory.domain import Reservation, order_tag, price_of, price_text
from inventory.messages import encoding, names
from inventory.models import Sku
from inventory.redis import gate
from inventory.redis.keys import sku_keys
from inventory.services.skus import sku_update
from orders.models import Order
from testsupport.http import place, post_order
from testsupport.purchase import publish, reserve_direct
from testsupport.stores import confirmed

pytestmark = pytest.mark.redis_both


def test_the_order_costs_the_price_at_the_click_not_at_the_confirm(api, make_sku, make_buyers, worker):
    sku = make_sku(stock=5, per_user_limit=3, price=Decimal("19.90"))
    (_, token), = make_buyers(1)
    client = api(token)
    first = place(client, sku.sku_id, qty=2)
    # while PROCESSING or after, the body carries what it costs
    body = client.get(f"/api/v1/orders/{first}").json()
    assert (body["amount"], body["currency"]) == ("39.80", "CNY"), body
    confirmed(first)
    sku_update(sku_id=sku.sku_id, actor="test", price=Decimal("25.00"))
    # the snapshot has the new price (pushed after the commit); the first order keeps its own
    assert price_of(_stock_field(sku.sku_id, "price")) == Decimal("25.00")
    second = place(client, sku.sku_id, qty=1)
    confirmed(second)
    rows = {o.order_id: (o.unit_price, o.amount, o.currency) for o in Order.objects.filter(sku=sku)}
    assert rows == {first: (Decimal("19.90"), Decimal("39.80"), "CNY"), second: (Decimal("25.00"), Decimal("25.00"),
                                                                               "CNY")}
    listed = {o["order_id"]: o["amount"] for o in client.get("/api/v1/orders").json()["results"]}
    assert listed == {first: "39.80", second: "25.00"}


def test_a_price_that_changes_between_the_click_and_the_confirm_is_the_clicks(api, make_sku, make_buyers):
    """No worker: the reservation waits in flight while ops change the price."""
    sku = make_sku(stock=5, price=Decimal("7.00"))
    (user, token), = make_buyers(1)
    r = reserve_direct(sku.sku_id, user.pk)
    assert r.unit_price == "7.00"
    sku_update(sku_id=sku.sku_id, actor="test", price=Decimal("9.00"))
    # the entry in flight kept its price, and the confirm (played here) records it
    [held] = gate.inflight_entries(sku_id=sku.sku_id)
    assert held.unit_price == "7.00"
    from orders.services.confirm import reservations_confirm
    reservations_confirm(reservations=[held])
    order = Order.objects.get(pk=r.order_id)
    assert (order.unit_price, order.amount) == (Decimal("7.00"), Decimal("7.00"))


def test_the_order_id_starts_with_its_skus_tag_which_mysql_finds(api, make_sku, make_buyers):
    sku = make_sku(stock=3)
    (_, token), = make_buyers(1)
    r = post_order(api(token), sku.sku_id)
    assert r.status_code == 202
    oid = r.json()["order_id"]
    assert oid[:8] == order_tag(sku.sku_id)
    # the generated column computes the same tag in MySQL (CRC-32, lowercase hex)
    assert Sku.objects.get(pk=sku.sku_id).order_tag == order_tag(sku.sku_id)
    assert sku.sku_id in Sku.objects.filter(order_tag=oid[:8]).values_list("sku_id", flat=True)


def test_a_reservation_and_a_message_of_before_prices_still_confirm_at_the_skus_price(make_sku, make_buyers,
                                                                                     worker):
    """An in-flight entry without the v2 head, and a version 1 confirm message
    (written by the release before this one), confirm at the SKU's price."""
    sku = make_sku(stock=5, per_user_limit=5, price=Decimal("3.30"))
    (user, _), = make_buyers(1)
    r = reserve_direct(sku.sku_id, user.pk, key="k|with|bars")
    # the entry rewritten as the release before wrote it
    old_entry = f"{user.pk}|1|{r.reserved_ms}|{r.epoch}|k|with|bars"
    gate_client = _client()
    gate_client.hset(sku_keys(sku.sku_id).inflight, r.order_id, old_entry)
    [parsed] = gate.inflight_entries(sku_id=sku.sku_id)
    assert (parsed.idempotency_key, parsed.unit_price, parsed.quantity) == ("k|with|bars", "", 1)
    old = Reservation(r.order_id, sku.sku_id, user.pk, 1, "k|with|bars", r.reserved_ms, r.epoch)
    body = json.dumps({"v": 1, "r": [[old.order_id, old.sku_id, old.user_id, old.quantity, old.reserved_ms,
                                      old.epoch, old.idempotency_key]]}, separators=(",", ":")).encode()
    headers = {names.SIGNATURE_HEADER: signing.sign_bytes(body), names.KIND_HEADER: "confirm"}
    assert encoding.confirm_decode(body, headers) == [old]
    publish(old)  # sent in today's format it carries no price either
    confirmed(r.order_id)
    order = Order.objects.get(pk=r.order_id)
    assert (order.unit_price, order.amount, order.currency) == (Decimal("3.30"), Decimal("3.30"), "CNY")


def test_price_text_is_two_places_and_price_of_refuses_what_is_not_a_price():
    assert [price_text(v) for v in (Decimal("5"), 5, "0.5", Decimal("199.999"))] == ["5.00", "5.00", "0.50",
                                                                                      "200.00"]
    assert [price_of(v) for v in ("", "abc", "-1", "NaN", "Infinity", "1.5")] == [None] * 5 + [Decimal("1.50")]


def _client():
    from core.redis.connection import redis
    return redis()


def _stock_field(sku_id: str, name: str) -> str:
    value = _client().hget(sku_keys(sku_id).stock, name)
    return value.decode() if isinstance(value, bytes) else value
