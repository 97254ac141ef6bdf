"""What an orders request must carry, checked through its declaration
(orders.api.declarations): the same constants /api/schema/ states."""
from __future__ import annotations

from decimal import Decimal

from core.api import Money
from core.errors import IdempotencyKeyRequired, OrderNotFound
from orders.api.declarations import (  # noqa: F401  (the limits, by name, for other checks)
    IDEMPOTENCY_KEY, KEY_MAX, ORDER_ID, PAY_BODY, PAYMENT_ID_MAX, PURCHASE_BODY, SKU_ID_MAX, WEBHOOK_BODY,
)

_key_accepts = IDEMPOTENCY_KEY.spec.accepts
_order_id_accepts = ORDER_ID.spec.accepts


def order_input(data: object) -> tuple[str, int]:
    """(sku_id, quantity) of a purchase body, or 400 `invalid` with the errors
    per field."""
    return PURCHASE_BODY.read(data)


def idempotency_key_of(meta: dict) -> str:
    key = meta.get("HTTP_IDEMPOTENCY_KEY")
    if not _key_accepts(key):
        raise IdempotencyKeyRequired()
    return key


def pay_input(data: object) -> str | None:
    """The optional `payment_id` of a pay body (a retried provider callback
    with the same id pays once), or 400 `invalid`."""
    return PAY_BODY.read(data)[0]


def order_id_of(order_id: str) -> str:
    """A path's order id, or 404 `not_found` without asking a store."""
    if not _order_id_accepts(order_id):
        raise OrderNotFound()
    return order_id



def webhook_input(data: object) -> tuple[str, str, Decimal, str]:
    """(order_id, payment_id, amount, currency) of a provider's capture body,
    or 400 `invalid`. The currency comes back in capitals."""
    order_id, payment_id, _captured, amount, currency = WEBHOOK_BODY.read(data)
    return order_id, payment_id, Money.value(amount), currency.upper()
