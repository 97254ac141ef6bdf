"""Reconciliation: recover work that fell between the stores, measure the drift
between the Redis gate and the MySQL book, repair it only when that is safe."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from inventory import redis_store, selectors as inventory_selectors
from inventory.models import DeadLetter, InventoryLog, OutboxMessage, Sku
from inventory.services import Reservation, outbox_relay, skus_lock, stock_warm
from reconciliation.models import Finding, ReconciliationRun, SkuReconciliation

logger = logging.getLogger(__name__)


@dataclass
class OrphanSweep:
    republished: list[str] = field(default_factory=list)
    settled: list[str] = field(default_factory=list)


def orphans_recover(*, grace_seconds: int | None = None, sku_ids: list[str] | None = None) -> OrphanSweep:
    """Re-publish the confirm of every reservation in flight for too long.

    Its message was lost (web process killed between the Lua call and the
    publish, broker lost an unconfirmed message, or it was dead-lettered while
    a store was down). The confirm is idempotent, so re-publishing one that is
    merely slow costs a no-op. An order already in MySQL is settled instead.
    """
    from orders.models import Order

    from inventory.tasks import publish_confirms

    grace_ms = 1000 * (settings.SECKILL_ORPHAN_GRACE_SECONDS if grace_seconds is None else grace_seconds)
    now_ms = int(time.time() * 1000)
    sweep = OrphanSweep()
    for sku_id in (sku_ids if sku_ids is not None else inventory_selectors.sku_ids_live()):
        stale = [e for e in redis_store.inflight_entries(sku_id=sku_id) if now_ms - e.reserved_ms >= grace_ms]
        if not stale:
            continue
        known = dict(
            Order.objects.filter(order_id__in=[e.order_id for e in stale]).values_list("order_id", "status")
        )
        done = [e.order_id for e in stale if e.order_id in known and known[e.order_id] != Order.Status.FAILED]
        if done:
            redis_store.settle(sku_id=sku_id, confirmed=done, failed=[])
            sweep.settled += done
        lost = [Reservation.from_inflight(sku_id, e) for e in stale if e.order_id not in done]
        publish_confirms(lost)
        sweep.republished += [r.order_id for r in lost]
    if sweep.republished or sweep.settled:
        logger.warning("orphan sweep: republished %s, settled %s", sweep.republished, sweep.settled)
    return sweep


# --- The reconciliation run -----------------------------------------------------

STALE_OUTBOX_SECONDS = 30
STALE_GIVE_SECONDS = 120
GIVE_LOOKBACK = timedelta(days=7)


@dataclass(frozen=True)
class Measure:
    sku: Sku
    redis_available: int | None
    in_flight: int = 0
    gives_unapplied: int = 0

    @property
    def missing(self) -> bool:
        return self.redis_available is None

    @property
    def expected(self) -> int:
        return self.sku.available_stock - self.in_flight - self.gives_unapplied

    @property
    def drift(self) -> int:
        return 0 if self.redis_available is None else self.redis_available - self.expected


def sku_measure(*, sku_id: str) -> Measure | None:
    """Both stores at one instant: the SKU row is locked (no confirm or give can
    commit meanwhile) while Redis is read in one script call."""
    from orders.models import Order

    with transaction.atomic():
        sku = skus_lock(sku_ids=[sku_id]).get(sku_id)
        if sku is None:
            return None
        gives = dict(
            OutboxMessage.objects.filter(sku_id=sku_id, created_at__gte=timezone.now() - GIVE_LOOKBACK)
            .values_list("op_id", "payload")
        )
        seen = redis_store.observe(sku_id=sku_id, give_ids=list(gives))
        if seen.available is None:
            return Measure(sku, None)
        ids = [e.order_id for e in seen.inflight]
        in_mysql = set(Order.objects.filter(pk__in=ids).values_list("order_id", flat=True)) if ids else set()
    in_flight = sum(e.quantity for e in seen.inflight if e.order_id not in in_mysql)
    unapplied = sum(int(p.get("quantity", 0)) for op, p in gives.items() if not seen.applied.get(op))
    return Measure(sku, seen.available, in_flight, unapplied)


def reconciliation_run(*, trigger: str, observe_gap_s: float = 0.3,
                       sku_ids: list[str] | None = None) -> ReconciliationRun:
    """Compare, recover, repair, and record. Safe during a live sale: it repairs
    only a drift seen twice, lowers Redis at once, and raises it only when the
    previous run saw the same shortfall."""
    run = ReconciliationRun.objects.create(trigger=trigger)
    findings: list[Finding] = []
    try:
        live = sku_ids if sku_ids is not None else inventory_selectors.sku_ids_live()
        sweep = orphans_recover(sku_ids=live)
        run.orphans = len(sweep.republished)
        if sweep.republished:
            findings.append(Finding(run=run, kind=Finding.Kind.ORPHAN_REPUBLISHED, repaired=True,
                                    ids=",".join(sweep.republished)[:20000],
                                    detail=f"{len(sweep.republished)} reservation(s) published again"))
        if sweep.settled:
            findings.append(Finding(run=run, kind=Finding.Kind.INFLIGHT_SETTLED, repaired=True,
                                    ids=",".join(sweep.settled)[:20000],
                                    detail=f"{len(sweep.settled)} confirmed order(s) settled in Redis"))
        findings += _resend_stale_gives(run)
        for sku_id in live:
            findings += _reconcile_sku(run, sku_id, observe_gap_s)
            run.skus_checked += 1
        dead = DeadLetter.objects.count()
        if dead:
            findings.append(Finding(run=run, kind=Finding.Kind.DEAD_LETTERS, mysql_value=dead,
                                    detail=f"{dead} dead letter(s) in the admin"))
    except Exception as exc:  # record the failure; the next run starts over
        logger.exception("reconciliation run %s failed", run.pk)
        run.error = repr(exc)[:2000]
    Finding.objects.bulk_create(findings)
    run.repairs = sum(1 for f in findings if f.repaired and f.kind in REPAIR_KINDS)
    run.alerts = sum(1 for f in findings if f.kind == Finding.Kind.DRIFT_ALERT)
    run.skus_drifting = run.rows.exclude(drift=0).count()
    run.finished_at = timezone.now()
    run.save()
    return run


REPAIR_KINDS = {Finding.Kind.DRIFT_LOWERED, Finding.Kind.DRIFT_RAISED, Finding.Kind.SNAPSHOT_REBUILT,
                Finding.Kind.OUTBOX_RESENT}


def _resend_stale_gives(run: ReconciliationRun) -> list[Finding]:
    """Unsent outbox rows past their deadline, and gives whose message was sent
    but whose log row is still pending (the message was lost): send again."""
    now = timezone.now()
    lost = list(
        InventoryLog.objects.filter(status=InventoryLog.Status.PENDING,
                                    created_at__lte=now - timedelta(seconds=STALE_GIVE_SECONDS))
        .exclude(operation=InventoryLog.Operation.DECR).values_list("op_id", flat=True)
    )
    if lost:
        OutboxMessage.objects.filter(op_id__in=lost, sent_at__isnull=False).update(sent_at=None)
    stale = list(OutboxMessage.objects.filter(
        sent_at__isnull=True, created_at__lte=now - timedelta(seconds=STALE_OUTBOX_SECONDS)
    ).values_list("op_id", flat=True)[:2000])
    if not stale:
        return []
    sent = outbox_relay(older_than_s=STALE_OUTBOX_SECONDS)
    return [Finding(run=run, kind=Finding.Kind.OUTBOX_RESENT, repaired=sent > 0, ids=",".join(stale)[:20000],
                    detail=f"{len(stale)} stale outbox message(s), {sent} sent again")]


def _reconcile_sku(run: ReconciliationRun, sku_id: str, gap_s: float) -> list[Finding]:
    first = sku_measure(sku_id=sku_id)
    if first is None:
        return []
    if first.missing:
        stock_warm(sku_id=sku_id)
        after = sku_measure(sku_id=sku_id)
        _row(run, after or first, SkuReconciliation.State.REBUILT)
        return [Finding(run=run, sku_id=sku_id, kind=Finding.Kind.SNAPSHOT_REBUILT, repaired=True,
                        redis_value=after.redis_available if after else None,
                        mysql_value=first.sku.available_stock,
                        detail="Redis had no snapshot; loaded from MySQL under the lock")]
    if first.drift == 0:
        _row(run, first, SkuReconciliation.State.OK)
        return []
    time.sleep(gap_s)
    second = sku_measure(sku_id=sku_id)
    if second is None or second.missing or second.drift == 0 or (second.drift > 0) != (first.drift > 0):
        # Moving figures (a confirm or a give between the looks): no repair.
        _row(run, second if second and not second.missing else first,
             SkuReconciliation.State.OK if second and second.drift == 0 else SkuReconciliation.State.DRIFT)
        return []
    d = min(abs(first.drift), abs(second.drift))
    values = dict(redis_value=second.redis_available, mysql_value=second.sku.available_stock)
    why = (f"redis {second.redis_available}, mysql available {second.sku.available_stock}, "
           f"in flight {second.in_flight}, gives not applied {second.gives_unapplied}")
    if second.drift > 0:
        # Redis above the truth could sell what MySQL does not have: lower now.
        _repair(run, sku_id, -d, why)
        _row(run, second, SkuReconciliation.State.REPAIRED)
        return [Finding(run=run, sku_id=sku_id, kind=Finding.Kind.DRIFT_LOWERED, repaired=True, **values,
                        detail=f"lowered by {d}: {why}"[:255])]
    previous = (SkuReconciliation.objects.filter(sku_id=sku_id, run__lt=run.pk).exclude(run=run)
                .order_by("-run_id").first())
    if previous is not None and previous.drift < 0 and previous.state in (SkuReconciliation.State.DRIFT,
                                                                          SkuReconciliation.State.ALERT):
        # The same shortfall in the previous run and twice now: proof enough.
        d = min(d, abs(previous.drift))
        _repair(run, sku_id, d, why)
        _row(run, second, SkuReconciliation.State.REPAIRED)
        return [Finding(run=run, sku_id=sku_id, kind=Finding.Kind.DRIFT_RAISED, repaired=True, **values,
                        detail=f"raised by {d}: {why}"[:255])]
    _row(run, second, SkuReconciliation.State.ALERT)
    return [Finding(run=run, sku_id=sku_id, kind=Finding.Kind.DRIFT_ALERT, **values,
                    detail=f"Redis {d} below MySQL; raised only if the next run sees it too: {why}"[:255])]


def _repair(run: ReconciliationRun, sku_id: str, delta: int, why: str) -> None:
    repair_id = f"repair:{run.pk}:{sku_id}"
    after = redis_store.adjust_available(sku_id=sku_id, repair_id=repair_id, delta=delta)
    InventoryLog.objects.create(
        sku_id=sku_id, operation=InventoryLog.Operation.REPAIR, quantity=abs(delta), op_id=repair_id,
        status=InventoryLog.Status.SUCCESS, actor="reconciliation",
        reason=f"redis available {'+' if delta > 0 else ''}{delta} -> {after}; {why}"[:255])
    logger.warning("reconciliation %s repaired %s by %+d (%s)", run.pk, sku_id, delta, why)


def _row(run: ReconciliationRun, m: Measure, state: str) -> None:
    s = m.sku
    SkuReconciliation.objects.create(
        run=run, sku=s, redis_available=m.redis_available, mysql_available=s.available_stock,
        mysql_total=s.total_stock, mysql_frozen=s.frozen_stock, mysql_locked=s.locked_stock,
        mysql_sold=s.sold_stock, in_flight=m.in_flight, gives_unapplied=m.gives_unapplied,
        expected_redis=m.expected, drift=m.drift, state=state)
