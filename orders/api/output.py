"""What an order looks like in an API answer: one definition for every call.
Times are ISO 8601 in UTC (`...Z`), whatever TIME_ZONE the admin shows."""
from __future__ import annotations

from datetime import datetime, timezone

from orders.selectors import OrderView


def iso_utc(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def iso_ms(ms: int) -> str:
    return iso_utc(datetime.fromtimestamp(ms / 1000, tz=timezone.utc))


def order_body(view: OrderView) -> dict:
    return {"order_id": view.order_id, "sku_id": view.sku_id, "quantity": view.quantity, "status": view.status,
            "created_at": iso_utc(view.created_at), "expires_at": iso_utc(view.expires_at),
            "confirmed_at": iso_utc(view.confirmed_at), "paid_at": iso_utc(view.paid_at),
            "closed_at": iso_utc(view.closed_at), "failure_reason": view.failure_reason}
