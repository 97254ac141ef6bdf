"""Order reads: MySQL for confirmed orders, Redis for those still in flight."""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone as dt_timezone

from django.db.models import QuerySet

from inventory import redis_store, selectors as inventory_selectors
from orders.models import Order

ORDER_ID_RE = re.compile(r"^[0-9a-f]{32}$")


@dataclass(frozen=True)
class OrderView:
    order_id: str
    sku_id: str
    quantity: int
    status: str
    created_at: datetime
    expires_at: datetime | None
    confirmed_at: datetime | None = None
    paid_at: datetime | None = None
    closed_at: datetime | None = None
    failure_reason: str = ""

    @classmethod
    def of(cls, o: Order) -> "OrderView":
        return cls(o.order_id, o.sku_id, o.quantity, o.status, o.created_at, o.expires_at,
                   o.confirmed_at, o.paid_at, o.closed_at, o.failure_reason)


def order_get(*, user_id: int, order_id: str) -> OrderView | None:
    """The caller's order, or None (also for another user's order)."""
    if not ORDER_ID_RE.match(order_id):
        return None
    row = Order.objects.filter(pk=order_id, user_id=user_id).first()
    if row is not None:
        return OrderView.of(row)
    found = redis_store.find_inflight(sku_ids=inventory_selectors.sku_ids_live(), order_id=order_id)
    if found is None:
        # The confirm commits in MySQL and then settles Redis: it may have done
        # both between the two reads above.
        row = Order.objects.filter(pk=order_id, user_id=user_id).first()
        return OrderView.of(row) if row is not None else None
    sku_id, entry = found
    if entry.user_id != user_id:
        return None
    # The confirm may have committed between the two reads.
    row = Order.objects.filter(pk=order_id, user_id=user_id).first()
    if row is not None:
        return OrderView.of(row)
    return OrderView(
        order_id=order_id, sku_id=sku_id, quantity=entry.quantity, status=Order.Status.PROCESSING,
        created_at=datetime.fromtimestamp(entry.reserved_ms / 1000, tz=dt_timezone.utc), expires_at=None,
    )


def order_list(*, user_id: int) -> QuerySet[Order]:
    return Order.objects.filter(user_id=user_id).order_by("-created_at", "-order_id")


def orders_in_flight(*, user_id: int) -> list[OrderView]:
    """The caller's orders accepted by the gate and not yet in MySQL (PROCESSING)."""
    found = redis_store.inflight_of_user(sku_ids=inventory_selectors.sku_ids_live(), user_id=user_id)
    if not found:
        return []
    stored = set(Order.objects.filter(pk__in=[e.order_id for _, e in found]).values_list("order_id", flat=True))
    views = [
        OrderView(order_id=e.order_id, sku_id=sku_id, quantity=e.quantity, status=Order.Status.PROCESSING,
                  created_at=datetime.fromtimestamp(e.reserved_ms / 1000, tz=dt_timezone.utc), expires_at=None)
        for sku_id, e in found if e.order_id not in stored
    ]
    return sorted(views, key=lambda v: (v.created_at, v.order_id), reverse=True)
