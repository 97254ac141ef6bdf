"""The API's order answer (orders.api.output) follows the one column list
(orders.selectors.VIEW_FIELDS, the fields of OrderView). No server involved."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

from orders.api.output import order_body
from orders.models import Order
from orders.selectors import VIEW_FIELDS, OrderView

# The answer as the contract (docs/contract.md) documents it: unchanged by deriving it.
CONTRACT = ["order_id", "sku_id", "quantity", "status", "created_at", "expires_at", "confirmed_at", "paid_at",
            "closed_at", "failure_reason", "amount", "currency"]


def test_the_answer_is_every_view_field_in_order_with_times_in_utc():
    at = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=timezone(timedelta(hours=8)))
    view = OrderView("o1", "S", 2, "PENDING_PAYMENT", created_at=at, expires_at=None, confirmed_at=at,
                     amount=Decimal("39.8"), currency="CNY")
    body = order_body(view)
    assert list(body) == list(VIEW_FIELDS) == CONTRACT
    # money is decimal text with two places, never a float
    assert (body["amount"], body["currency"]) == ("39.80", "CNY")
    assert body["created_at"] == "2026-01-01T19:04:05.678000Z" and body["expires_at"] is None
    assert (body["quantity"], body["failure_reason"], body["paid_at"]) == (2, "", None)


def test_every_view_field_is_a_column_of_the_order_model():
    for name in VIEW_FIELDS:
        Order._meta.get_field(name)  # FieldDoesNotExist otherwise
