"""What an order looks like in an API answer: one definition for every call.
Times are ISO 8601 in UTC (`...Z`), whatever TIME_ZONE the admin shows."""
from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from inventory.domain import price_text
from orders.selectors import VIEW_FIELDS, OrderView


def iso_utc(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def iso_ms(ms: int) -> str:
    return iso_utc(datetime.fromtimestamp(ms / 1000, tz=UTC))


def order_body(view: OrderView) -> dict:
    """Every field of the view (VIEW_FIELDS, in its order), times as ISO 8601,
    money as decimal text with two places (never a float)."""
    body = {}
    for name in VIEW_FIELDS:
        value = getattr(view, name)
        if isinstance(value, datetime):
            value = iso_utc(value)
        elif isinstance(value, Decimal):
            value = price_text(value)
        body[name] = value
    return body
