"""Every read of stock that the API, admin and reconciliation need."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Sum
from django.utils import timezone

from inventory import redis_store
from inventory.models import OutboxMessage, Sku

# A give older than this is surely applied (the relay sends within seconds).
GIVE_MEMORY_DAYS = 7


def epoch_ms(dt: datetime | None) -> int:
    return int(dt.timestamp() * 1000) if dt else 0


def sku_get(*, sku_id: str) -> Sku | None:
    return Sku.objects.filter(pk=sku_id).first()


def sku_list() -> list[Sku]:
    return list(Sku.objects.all())


def sku_ids_live() -> list[str]:
    """SKUs that may hold reservations: not ended."""
    return list(Sku.objects.exclude(status=Sku.Status.ENDED).values_list("sku_id", flat=True))


def sku_snapshot(*, sku: Sku) -> redis_store.Snapshot:
    """What Redis should hold for a SKU, recomputed from MySQL rows (call it
    with the SKU row locked, so no give commits between the reads).

    Per-user counts and idempotency records come from the orders, so a Redis
    that lost its data still enforces the limit and answers retries.
    """
    from orders.models import Order

    held = (
        Order.objects.filter(sku_id=sku.sku_id, status__in=[Order.Status.PENDING_PAYMENT, Order.Status.PAID])
        .values("user_id")
        .annotate(units=Sum("quantity"))
    )
    keyed = Order.objects.filter(sku_id=sku.sku_id, idempotency_key__isnull=False).values_list(
        "user_id", "idempotency_key", "order_id", "quantity"
    )
    since = timezone.now() - timedelta(days=GIVE_MEMORY_DAYS)
    gives = OutboxMessage.objects.filter(
        sku_id=sku.sku_id, topic=OutboxMessage.Topic.STOCK_GIVE, created_at__gte=since
    ).values_list("op_id", flat=True)
    return redis_store.Snapshot(
        available=sku.available_stock,
        total=sku.total_stock,
        frozen=sku.frozen_stock,
        version=sku.version,
        per_user_limit=sku.per_user_limit,
        starts_ms=epoch_ms(sku.sale_starts_at),
        ends_ms=epoch_ms(sku.sale_ends_at),
        status=sku.status,
        buyers={row["user_id"]: row["units"] for row in held if row["units"]},
        idempotency={f"{u}:{k}": f"{oid}|{q}" for u, k, oid, q in keyed},
        applied_gives=tuple(gives),
    )


@dataclass(frozen=True)
class SkuView:
    sku: Sku
    live: redis_store.LiveStock | None


def sku_views(*, skus: list[Sku]) -> list[SkuView]:
    live = redis_store.live_stock_many(sku_ids=[s.sku_id for s in skus]) if skus else {}
    return [SkuView(sku=s, live=live.get(s.sku_id)) for s in skus]


DASHBOARD_STATUSES = ("PENDING_PAYMENT", "PAID", "CANCELLED", "EXPIRED", "FAILED")


@dataclass(frozen=True)
class DashboardRow:
    sku: Sku
    live: redis_store.LiveStock | None
    orders_by_status: dict[str, int]

    @property
    def status_counts(self) -> list[int]:
        """Counts in the order of DASHBOARD_STATUSES (MySQL never holds PROCESSING)."""
        return [self.orders_by_status.get(s, 0) for s in DASHBOARD_STATUSES]

    @property
    def drift(self) -> int | None:
        """Redis available minus what MySQL implies (MySQL available minus in flight)."""
        if self.live is None:
            return None
        return self.live.available - (self.sku.available_stock - self.live.inflight)


def dashboard_rows() -> list[DashboardRow]:
    from django.db.models import Count

    from orders.models import Order

    skus = list(Sku.objects.exclude(status=Sku.Status.ENDED).order_by("sku_id"))
    counts: dict[str, dict[str, int]] = {}
    for row in Order.objects.filter(sku__in=skus).values("sku_id", "status").annotate(n=Count("pk")):
        counts.setdefault(row["sku_id"], {})[row["status"]] = row["n"]
    live = redis_store.live_stock_many(sku_ids=[s.sku_id for s in skus]) if skus else {}
    return [DashboardRow(s, live.get(s.sku_id), counts.get(s.sku_id, {})) for s in skus]
