"""What an orders request must carry, checked through its declaration
(orders.api.declarations): the same constants /api/schema/ states."""
from __future__ import annotations

from decimal import Decimal

from core.api import Money
from core.errors import IdempotencyKeyInvalid, IdempotencyKeyRequired, OrderNotFound
from orders.api.declarations import (  # noqa: F401  (the limits, by name, for other checks)
    IDEMPOTENCY_KEY,
    KEY_MAX,
    ORDER_ID,
    PAY_BODY,
    PAYMENT_ID_MAX,
    PURCHASE_BODY,
    SKU_ID_MAX,
    WEBHOOK_BODY,
)

_key_accepts = IDEMPOTENCY_KEY.spec.accepts
_order_id_accepts = ORDER_ID.spec.accepts


def order_input(data: object) -> tuple[str, int]:
    """(sku_id, quantity) of a purchase body, or 400 `invalid` with the errors
    per field."""
    return PURCHASE_BODY.read(data)


def idempotency_key_of(meta: dict) -> str:
    """The request's Idempotency-Key: 400 `idempotency_key_required` when the
    header is absent, 400 `idempotency_key_invalid` naming what is wrong when
    it is there but cannot be a key."""
    key = meta.get("HTTP_IDEMPOTENCY_KEY")
    if _key_accepts(key):  # every purchase passes here: one check, nothing else
        return key
    if key is None:
        raise IdempotencyKeyRequired()
    raise IdempotencyKeyInvalid("Header Idempotency-Key " + "; ".join(key_problems(key)) + ".")


def key_problems(key: str) -> list[str]:
    """What keeps a header value from being a key, in words for the client.
    gunicorn hands a header over as its bytes read as latin-1, so a position
    counts bytes as they were sent (a UTF-8 "é" is two of them); granian hands
    a header holding any byte outside visible ASCII over as empty, so an empty
    one says both."""
    if not key:
        return [(f"is empty: a key is 1 to {KEY_MAX} visible ASCII characters (a value with a character outside "
                 "visible ASCII, U+0021 to U+007E, may reach the server as empty)")]
    problems = []
    if len(key) > KEY_MAX:
        problems.append(f"is {len(key)} characters long, over the limit of {KEY_MAX}")
    outside = next((i for i, c in enumerate(key) if not " " <= c <= "~"), None)
    if outside is not None:
        problems.append(f"has a character outside visible ASCII (U+0021 to U+007E) at position {outside + 1}")
    if key[0] == " " or key[-1] == " ":
        problems.append("begins or ends with a space (spaces are allowed inside only)")
    return problems or [f"does not match {IDEMPOTENCY_KEY.spec.pattern}"]


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
