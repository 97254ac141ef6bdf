"""Order reads: MySQL for confirmed orders, Redis for those still in flight."""
from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import QuerySet, Sum
from django.utils import timezone

from accounts import token_cache
from core import db
from inventory import selectors as inventory_selectors
from inventory.domain import Reservation, price_of
from inventory.redis import gate
from inventory.services.snapshots import Holdings
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
    # None only while PROCESSING for a reservation taken before prices were kept.
    amount: Decimal | None = None
    currency: str = ""

    @classmethod
    def of(cls, o: Order) -> OrderView:
        return cls(*(getattr(o, name) for name in VIEW_FIELDS))

    @classmethod
    def processing(cls, r: Reservation) -> OrderView:
        price = price_of(r.unit_price)
        return cls(order_id=r.order_id, sku_id=r.sku_id, quantity=r.quantity, status=Order.Status.PROCESSING,
                   created_at=datetime.fromtimestamp(r.reserved_ms / 1000, tz=UTC), expires_at=None,
                   amount=None if price is None else price * r.quantity, currency=settings.SECKILL_CURRENCY)


# The one list of the order columns readers see: the fields of OrderView, in
# its order (the raw SELECTs, and the API answer, orders.api.output, follow it).
# A new column shown to buyers is a field of the model and one of OrderView;
# the confirm's insert gives any other column its model default (core.db.Insert).
VIEW_FIELDS = tuple(f.name for f in dataclasses.fields(OrderView))


def _in_flight(*, user_id: int, token: str, order_ids: set[str] | None = None) -> list[Reservation]:
    """The caller's reservations still in flight, found through the orders its
    token's Idempotency-Keys made (an index per user, so the cost does not grow
    with other buyers' reservations)."""
    claims = token_cache.user_claims(token=token)
    candidates = [(c.sku_id, c.order_id) for c in claims if order_ids is None or c.order_id in order_ids]
    return [r for r in gate.inflight_find(candidates=candidates) if r.user_id == user_id]


def order_in_flight(*, order_id: str) -> Reservation | None:
    """The reservation of this order id the gate holds in flight, whoever
    placed it (the payment webhook has no token): its SKU is found from the
    order id's head, the tag of its SKU (orders.services.place.order_id_new)."""
    if not ORDER_ID_RE.match(order_id):
        return None
    skus = inventory_selectors.skus_of_order_tag(tag=order_id[:8])
    found = gate.inflight_find(candidates=[(sku_id, order_id) for sku_id in skus])
    return found[0] if found else None


@functools.cache
def _stored_sql() -> str:
    return (f"SELECT {', '.join(db.columns(Order, VIEW_FIELDS))} FROM {db.table(Order)} "
            f"WHERE {db.columns(Order, ['order_id'])[0]} = %s AND {db.columns(Order, ['user'])[0]} = %s")


def order_stored(*, user_id: int, order_id: str) -> OrderView | None:
    """The user's order as MySQL has it, or None. On the path of every pay and
    cancel, so one statement compiled once (core.db)."""
    row = db.fetch_one(_stored_sql(), [order_id, user_id])
    return OrderView(*row) if row is not None else None


def order_get(*, user_id: int, token: str, order_id: str) -> OrderView | None:
    """The caller's order, or None (also for another user's order)."""
    if not ORDER_ID_RE.match(order_id):
        return None
    stored = order_stored(user_id=user_id, order_id=order_id)
    if stored is not None:
        return stored
    found = _in_flight(user_id=user_id, token=token, order_ids={order_id})
    # The confirm commits in MySQL and then settles Redis: it may have done
    # both between the two reads.
    stored = order_stored(user_id=user_id, order_id=order_id)
    if stored is not None:
        return stored
    return OrderView.processing(found[0]) if found else None


def order_list(*, user_id: int) -> QuerySet[Order]:
    return Order.objects.filter(user_id=user_id).order_by("-created_at", "-order_id")


def orders_in_flight(*, user_id: int, token: str) -> list[OrderView]:
    """The caller's orders accepted by the gate and not yet in MySQL (PROCESSING)."""
    found = _in_flight(user_id=user_id, token=token)
    if not found:
        return []
    stored = set(Order.objects.filter(pk__in=[r.order_id for r in found]).values_list("order_id", flat=True))
    views = [OrderView.processing(r) for r in found if r.order_id not in stored]
    return sorted(views, key=lambda v: (v.created_at, v.order_id), reverse=True)


def user_key_claims(user_id: int) -> list[tuple[str, token_cache.KeyClaim]]:
    """What the user's Idempotency-Keys made within their lifetime, as MySQL has
    it (a token whose claims a Redis shard lost reads them once, accounts)."""
    since = timezone.now() - timedelta(seconds=settings.SECKILL_IDEMPOTENCY_SECONDS)
    rows = (Order.objects.filter(user_id=user_id, created_at__gte=since, idempotency_key__isnull=False)
            .values_list("idempotency_key", "order_id", "sku_id", "quantity", "created_at"))
    return [(key, token_cache.KeyClaim(order_id, sku_id, quantity, int(created.timestamp() * 1000)))
            for key, order_id, sku_id, quantity, created in rows]


def sku_holdings(sku_id: str) -> Holdings:
    """What a SKU's orders hold, for its Redis snapshot (inventory asks through
    `holdings_source_register`). Bounded: buyers holding units (at most the
    stock), and the idempotency records within their lifetime."""
    held = (Order.objects.filter(sku_id=sku_id, status__in=[Order.Status.PENDING_PAYMENT, Order.Status.PAID])
            .values("user_id").annotate(units=Sum("quantity")))
    since = timezone.now() - timedelta(seconds=settings.SECKILL_IDEMPOTENCY_SECONDS)
    keyed = (Order.objects.filter(sku_id=sku_id, created_at__gte=since, idempotency_key__isnull=False)
             .values_list("user_id", "idempotency_key", "order_id", "quantity", "created_at"))
    return Holdings(
        buyers={row["user_id"]: row["units"] for row in held if row["units"]},
        idempotency={f"{u}:{k}": (f"{oid}|{q}", int(created.timestamp() * 1000)) for u, k, oid, q, created in keyed},
    )


def skus_with_moves(*, limit: int = 100) -> list[str]:
    """SKUs with order moves decided but not applied to their row yet."""
    # order_by(): the model's default ordering would make DISTINCT run over
    # (sku, created_at, order_id), one row per order instead of per SKU.
    return list(Order.objects.filter(bucket=Order.Bucket.LOCKED, status__in=Order.MOVING_STATUSES)
                .order_by().values_list("sku_id", flat=True).distinct()[:limit])


def moves_pending(*, sku_ids: list[str]) -> int:
    return Order.objects.filter(sku_id__in=sku_ids, bucket=Order.Bucket.LOCKED,
                                status__in=Order.MOVING_STATUSES).count()
