"""Every read of stock that the API, admin and reconciliation need."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Exists, OuterRef, Q
from django.db.models.functions import Now
from django.utils import timezone

from core import db
from inventory.domain import price_text, sku_id_valid
from inventory.models import GIVE_OPERATIONS, InventoryLog, OutboxMessage, ReservationDecision, Sku
from inventory.redis import gate, live as redis_live, snapshots as redis_snapshots

# Ended SKUs are still swept this long after they ended, while reservations
# of theirs are in flight.
ENDED_SWEEP_HORIZON = timedelta(days=7)


def epoch_ms(dt: datetime | None) -> int:
    return int(dt.timestamp() * 1000) if dt else 0


def sku_get(*, sku_id: str) -> Sku | None:
    return Sku.objects.filter(pk=sku_id).first()


def sku_list() -> list[Sku]:
    return list(Sku.objects.all())


def sku_ids_live() -> list[str]:
    """SKUs that may hold reservations: not ended, and not retired (retention
    dropped their keys: nothing can be in flight without a snapshot)."""
    return list(Sku.objects.exclude(status=Sku.Status.ENDED).filter(redis_dropped_at__isnull=True)
                .values_list("sku_id", flat=True))


def sku_ids_live_warmed() -> list[str]:
    """Live SKUs Redis held at some time (epoch > 0): a new Redis instance may
    have lost reservations of theirs; the others load at once, as always."""
    return list(Sku.objects.exclude(status=Sku.Status.ENDED)
                .filter(redis_dropped_at__isnull=True, redis_epoch__gt=0).values_list("sku_id", flat=True))


def sku_ids_live_outside_alphabet() -> list[str]:
    """Live SKUs whose id was made before the SKU-id alphabet was enforced
    (inventory.domain): `manage.py check` lists them. Checked here, not by the
    database's REGEXP, whose `$` also takes a final newline."""
    return [sku_id for sku_id in Sku.objects.exclude(status=Sku.Status.ENDED).order_by("sku_id")
            .values_list("sku_id", flat=True).iterator(chunk_size=2000) if not sku_id_valid(sku_id)]


def sku_ids_sweepable() -> list[str]:
    """SKUs the sweeps visit: the live ones, the ones that ended recently while
    reservations of theirs are still in flight (a reservation accepted before
    the end must still become an order), and ended ones whose gives or freezes
    are still pending, however long ago they ended (the sweeps bring their
    snapshot back, fenced if Redis lost it, so those can be applied)."""
    live = sku_ids_live()
    ended = list(Sku.objects.filter(status=Sku.Status.ENDED, redis_dropped_at__isnull=True,
                                    status_changed_at__gte=timezone.now() - ENDED_SWEEP_HORIZON)
                 .values_list("sku_id", flat=True))
    if ended:
        counts = gate.inflight_count(sku_ids=ended)
        live += [s for s in ended if counts.get(s)]
    pending = set(InventoryLog.objects.filter(status=InventoryLog.Status.PENDING,
                                              operation__in=(*GIVE_OPERATIONS, InventoryLog.Operation.FREEZE),
                                              sku__status=Sku.Status.ENDED, sku__redis_dropped_at__isnull=True)
                  .order_by().values_list("sku_id", flat=True).distinct())
    return live + sorted(pending - set(live))


def sku_ids_retirable(*, grace_s: float, limit: int) -> list[str]:
    """Ended SKUs whose Redis keys retention may drop, as MySQL decides (by its
    own clock): ended by ops at least `grace_s` ago, or their window over by
    that much; loaded once and not dropped since; no give or freeze pending.
    Redis checks its own half when it drops (inventory.services.retention)."""
    cutoff = Now() - timedelta(seconds=grace_s)
    pending = InventoryLog.objects.filter(status=InventoryLog.Status.PENDING, sku_id=OuterRef("pk"),
                                          operation__in=(*GIVE_OPERATIONS, InventoryLog.Operation.FREEZE))
    ended = (Q(status=Sku.Status.ENDED, status_changed_at__lte=cutoff)
             | Q(sale_ends_at__isnull=False, sale_ends_at__lte=cutoff))
    return list(Sku.objects.filter(ended, redis_epoch__gt=0, redis_dropped_at__isnull=True)
                .exclude(Exists(pending)).order_by("pk").values_list("sku_id", flat=True)[:limit])


@dataclass(frozen=True)
class PendingOp:
    op_id: str
    quantity: int


def pending_gives(*, sku_id: str) -> list[PendingOp]:
    """Gives committed in MySQL whose Redis half is not known to be applied."""
    rows = InventoryLog.objects.filter(sku_id=sku_id, status=InventoryLog.Status.PENDING,
                                       operation__in=GIVE_OPERATIONS).values_list("op_id", flat=True)
    ops = list(rows)
    payloads = dict(OutboxMessage.objects.filter(op_id__in=ops).values_list("op_id", "payload")) if ops else {}
    return [PendingOp(op, int(payloads.get(op, {}).get("quantity", 0))) for op in ops]


def skus_of_order_tag(*, tag: str) -> list[str]:
    """The SKUs whose order ids start with `tag` (inventory.domain.order_tag;
    indexed, usually one SKU)."""
    return list(Sku.objects.filter(order_tag=tag).values_list("sku_id", flat=True)[:16])


def pending_freezes(*, sku_id: str) -> list[PendingOp]:
    """Freezes between their intent and their MySQL move (their Redis take may
    or may not have happened)."""
    rows = InventoryLog.objects.filter(sku_id=sku_id, status=InventoryLog.Status.PENDING,
                                       operation=InventoryLog.Operation.FREEZE).values_list("op_id", "quantity")
    return [PendingOp(op, q) for op, q in rows]


def sku_snapshot(*, sku: Sku, holdings, epoch: int) -> redis_snapshots.Snapshot:
    """What Redis should hold for a SKU, from MySQL (call it with the SKU row
    locked, so no give or freeze commits between the reads). Bounded: buyers
    that hold units, idempotency records within their lifetime (from
    `holdings`), and the gives and freezes still pending.

    A pending freeze counts as taken (its Redis take may already have happened
    in the Redis that was lost, or may come: it then finds itself applied)."""
    gives = pending_gives(sku_id=sku.sku_id)
    freezes = pending_freezes(sku_id=sku.sku_id)
    frozen_pending = sum(f.quantity for f in freezes)
    return redis_snapshots.Snapshot(
        available=sku.available_stock - frozen_pending,
        total=sku.total_stock,
        frozen=sku.frozen_stock + frozen_pending,
        version=sku.version,
        per_user_limit=sku.per_user_limit,
        starts_ms=epoch_ms(sku.sale_starts_at),
        ends_ms=epoch_ms(sku.sale_ends_at),
        status=sku.status,
        buyers=dict(holdings.buyers),
        idempotency=dict(holdings.idempotency),
        applied_ops=tuple(g.op_id for g in gives) + tuple(f.op_id for f in freezes),
        epoch=epoch,
        unit_price=price_text(sku.price),
    )


@dataclass(frozen=True)
class SkuView:
    sku: Sku
    live: redis_live.LiveStock | None

    @property
    def available(self) -> int:
        """The live Redis figure (MySQL's while Redis has no snapshot)."""
        return self.live.available if self.live is not None else self.sku.available_stock

    @property
    def sale_state(self) -> str:
        """on_sale, sold_out, upcoming, ended, or the status ops set (paused)."""
        sku, now = self.sku, timezone.now()
        if sku.status != Sku.Status.ACTIVE:
            return sku.status
        if sku.sale_starts_at and now < sku.sale_starts_at:
            return "upcoming"
        if sku.sale_ends_at and now >= sku.sale_ends_at:
            return "ended"
        return "sold_out" if self.available <= 0 else "on_sale"


def sku_views(*, skus: list[Sku]) -> list[SkuView]:
    live = redis_live.live_stock_many(sku_ids=[s.sku_id for s in skus]) if skus else {}
    return [SkuView(sku=s, live=live.get(s.sku_id)) for s in skus]


@functools.cache
def _decisions_sql(n: int) -> str:
    order_col, outcome_col = db.columns(ReservationDecision, ["order_id", "outcome"])
    return (f"SELECT {order_col}, {outcome_col} FROM {db.table(ReservationDecision)} "
            f"WHERE {order_col} IN ({db.marks(n)})")


def reservation_decisions(*, order_ids: list[str]) -> dict[str, str]:
    """The outcome (ReservationDecision.Outcome) of each of these reservations
    that was decided; the ones not in the answer were not."""
    if not order_ids:
        return {}
    # Asked by every confirm batch with up to a thousand ids: SQL compiled once (core.db).
    legacy = ReservationDecision.LEGACY_OUTCOMES
    return {oid: legacy.get(outcome, outcome) for oid, outcome in db.fetch_all(_decisions_sql(len(order_ids)),
                                                                             order_ids)}
