"""Reconciliation: recover work that fell between the stores, measure the drift
between the Redis gate and the MySQL book, repair it only when that is safe."""
from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.redis.errors import RedisError
from inventory import selectors as inventory_selectors
from inventory.messages import publisher
from inventory.models import ReservationDecision, Sku
from inventory.redis import gate, live as redis_live
from inventory.services import gives as give_services, stock as stock_services
from inventory.services.locks import skus_lock
from inventory.services.orphans import fences_relist, orphans_reschedule
from inventory.services.skus import sku_sale_data_push
from inventory.services.snapshots import Warm, stock_warm
from orders.services.confirm import reservations_settle_known
from reconciliation import alerts, selectors
from reconciliation.lease import Lease, run_lease
from reconciliation.models import Finding, ReconciliationRun, SkuReconciliation

logger = logging.getLogger(__name__)

DECISIONS_CHUNK = 500


@dataclass
class OrphanSweep:
    republished: list[str] = field(default_factory=list)
    settled: list[str] = field(default_factory=list)


def orphans_recover(*, sku_ids: list[str] | None = None, cap: int | None = None,
                    ahead_s: float = 0) -> OrphanSweep:
    """Publish again the confirm of every reservation past its deadline.

    Its message may be lost (web process killed between the Lua call and the
    publish, broker lost it, it was dead-lettered while a store was down). A
    reservation that is merely slow is not republished again before its next
    deadline, which moves further out as it ages (orphans_reschedule); at most
    `cap` per SKU per sweep, in messages of a bounded size. A reservation MySQL
    already decided (its ReservationDecision) is settled as decided instead.
    """
    cap = cap or settings.SECKILL_ORPHAN_SWEEP_CAP
    sweep = OrphanSweep()
    sku_ids = sku_ids if sku_ids is not None else inventory_selectors.sku_ids_sweepable()
    # A fence never listed is a message never sent, too (fences_relist).
    try:
        if fences_relist(sku_ids=sku_ids):
            logger.warning("orphan sweep: listed a fence again")
    except RedisError as exc:  # a shard down: the next sweep lists them
        logger.warning("orphan sweep: fences not relisted: %r", exc)
    unreachable = []
    for sku_id in sku_ids:
        try:
            due = orphans_reschedule(sku_id=sku_id, cap=cap, ahead_ms=int(ahead_s * 1000))
        except RedisError:
            # Its shard is down (a cluster's master lost, its replica not promoted
            # yet): the SKUs of the other shards are swept meanwhile.
            unreachable.append(sku_id)
            continue
        if not due:
            continue
        decided = _decisions(order_ids=[r.order_id for r in due])
        if decided:
            reservations_settle_known(sku_id=sku_id, decided=decided)
            sweep.settled += list(decided)
        lost = [r for r in due if r.order_id not in decided]
        publisher.publish_confirms(lost)
        sweep.republished += [r.order_id for r in lost]
    if sweep.republished or sweep.settled:
        logger.warning("orphan sweep: republished %d, settled %d (first: %s)", len(sweep.republished),
                       len(sweep.settled), (sweep.republished + sweep.settled)[:10])
    if unreachable:
        if len(unreachable) == len(sku_ids):
            raise RedisError(f"orphan sweep: Redis unreachable for every SKU ({len(unreachable)})")
        logger.warning("orphan sweep: %d SKU(s) not swept, their Redis shard unreachable: %s", len(unreachable),
                       unreachable[:10])
    return sweep


def _decisions(*, order_ids: list[str]) -> dict[str, str]:
    """The outcome of each of these reservations MySQL decided (order id ->
    ReservationDecision.Outcome), read in bounded chunks."""
    decided: dict[str, str] = {}
    for i in range(0, len(order_ids), DECISIONS_CHUNK):
        decided.update(inventory_selectors.reservation_decisions(order_ids=order_ids[i:i + DECISIONS_CHUNK]))
    return decided


# --- The reconciliation run -----------------------------------------------------

@dataclass(frozen=True)
class Measure:
    sku: Sku
    redis_available: int | None
    in_flight: int = 0
    gives_unapplied: int = 0
    freezes_taken: int = 0
    redis_version: int | None = None

    @property
    def missing(self) -> bool:
        return self.redis_available is None

    @property
    def expected(self) -> int:
        """What Redis should show: MySQL's available, less what Redis holds in
        flight (not yet orders), less gives MySQL made that Redis has not
        applied yet, less freezes Redis took that MySQL has not moved yet."""
        return self.sku.available_stock - self.in_flight - self.gives_unapplied - self.freezes_taken

    @property
    def drift(self) -> int:
        return 0 if self.redis_available is None else self.redis_available - self.expected


def sku_measure(*, sku_id: str) -> Measure | None:
    """Both stores at one instant: the SKU row is locked (no confirm, give or
    freeze can commit meanwhile) while Redis is read in one script call. Reads
    only what is pending, so its cost does not grow with history."""
    with transaction.atomic():
        sku = skus_lock(sku_ids=[sku_id]).get(sku_id)
        if sku is None:
            return None
        gives = inventory_selectors.pending_gives(sku_id=sku_id)
        freezes = inventory_selectors.pending_freezes(sku_id=sku_id)
        seen = gate.observe(sku_id=sku_id, op_ids=[g.op_id for g in gives] + [f.op_id for f in freezes])
        if seen.available is None:
            return Measure(sku, None)
        # Only a confirmed reservation took units in MySQL; a refused one (a FAILED
        # order) took nothing, so until it is settled it still counts as in flight.
        taken = {oid for oid, outcome in _decisions(order_ids=[r.order_id for r in seen.inflight]).items()
                 if outcome == ReservationDecision.Outcome.CONFIRMED}
        version = redis_live.live_stock(sku_id=sku_id)
    in_flight = sum(r.quantity for r in seen.inflight if r.order_id not in taken)
    unapplied = sum(g.quantity for g in gives if not seen.applied.get(g.op_id))
    frozen = sum(f.quantity for f in freezes if seen.applied.get(f.op_id))
    return Measure(sku, seen.available, in_flight, unapplied, frozen, version.version if version else None)


def reconciliation_run(*, trigger: str, observe_gap_s: float = 0.3,
                       sku_ids: list[str] | None = None) -> ReconciliationRun:
    """Compare, recover, repair, and record. Safe during a live sale: it repairs
    only a drift seen twice, lowers Redis at once, and raises it only when the
    previous run saw the same shortfall. Raises ReconciliationBusy when another
    run is going on."""
    with run_lease() as lease:
        run = _run(trigger=trigger, observe_gap_s=observe_gap_s, sku_ids=sku_ids, lease=lease)
    # After the findings are committed and outside the run lock: a slow mail
    # server delays no run, and an alert is sent once (reconciliation.alerts).
    transaction.on_commit(lambda: alerts.alerts_send(run_id=run.pk))
    return run


def _run(*, trigger: str, observe_gap_s: float, sku_ids: list[str] | None, lease: Lease) -> ReconciliationRun:
    run = ReconciliationRun.objects.create(trigger=trigger)
    findings: list[Finding] = []
    try:
        live = sku_ids if sku_ids is not None else inventory_selectors.sku_ids_sweepable()
        sweep = orphans_recover(sku_ids=live)
        run.orphans = len(sweep.republished)
        if sweep.republished:
            findings.append(Finding(run=run, kind=Finding.Kind.ORPHAN_REPUBLISHED, repaired=True,
                                    ids=",".join(sweep.republished)[:20000],
                                    detail=f"{len(sweep.republished)} reservation(s) published again"))
        if sweep.settled:
            findings.append(Finding(run=run, kind=Finding.Kind.INFLIGHT_SETTLED, repaired=True,
                                    ids=",".join(sweep.settled)[:20000],
                                    detail=f"{len(sweep.settled)} reservation(s) MySQL had decided settled in Redis"))
        findings += _resend_stale_gives(run)
        findings += _cancel_stale_freezes(run)
        findings += _reconcile_each(run, live, observe_gap_s, lease)
        dead = selectors.dead_letters_count()
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


def _reconcile_each(run: ReconciliationRun, sku_ids: list[str], gap_s: float, lease: Lease) -> list[Finding]:
    """Every SKU in its own try: one that fails (its shard down, an id made
    before the SKU-id alphabet that a Redis Cluster refuses) is logged and
    named in the run's error, and the others are still reconciled. The lease
    is renewed before each SKU: a run that lost it stops (LeaseLost) before it
    measures or repairs anything more."""
    findings: list[Finding] = []
    failed: dict[str, str] = {}
    for sku_id in sku_ids:
        lease.hold()
        try:
            findings += _reconcile_sku(run, sku_id, gap_s, lease)
        except Exception as exc:
            logger.exception("reconciliation run %s: SKU %s not reconciled", run.pk, sku_id)
            failed[sku_id] = repr(exc)
            continue
        run.skus_checked += 1
    if failed:
        run.error = (f"{len(failed)} SKU(s) not reconciled (the next run tries again): "
                     + "; ".join(f"{sku_id}: {why}" for sku_id, why in list(failed.items())[:10]))[:2000]
    return findings


REPAIR_KINDS = {Finding.Kind.DRIFT_LOWERED, Finding.Kind.DRIFT_RAISED, Finding.Kind.SNAPSHOT_REBUILT,
                Finding.Kind.OUTBOX_RESENT, Finding.Kind.FREEZES_CANCELLED}


def _resend_stale_gives(run: ReconciliationRun) -> list[Finding]:
    """Gives whose message was lost or found no snapshot (log row still pending),
    and unsent outbox rows past their deadline: send again."""
    lost = give_services.gives_resend_lost()
    sent = give_services.outbox_relay(older_than_s=30)
    if not (lost or sent):
        return []
    return [Finding(run=run, kind=Finding.Kind.OUTBOX_RESENT, repaired=sent > 0, ids=",".join(lost)[:20000],
                    detail=f"{len(lost)} give(s) not applied in Redis, {sent} outbox message(s) sent again")]


def _cancel_stale_freezes(run: ReconciliationRun) -> list[Finding]:
    """Freezes whose process died between their intent and their MySQL move: cancelled."""
    resolved = stock_services.stock_freezes_resolve()
    if not resolved:
        return []
    return [Finding(run=run, kind=Finding.Kind.FREEZES_CANCELLED, repaired=True,
                    detail=f"{resolved} unfinished freeze(s) cancelled")]


def _reconcile_sku(run: ReconciliationRun, sku_id: str, gap_s: float, lease: Lease | None = None) -> list[Finding]:
    first = sku_measure(sku_id=sku_id)
    if first is None:
        return []
    if first.missing:
        fenced = stock_warm(sku_id=sku_id) is Warm.FENCED
        after = sku_measure(sku_id=sku_id)
        _row(run, after or first, SkuReconciliation.State.REBUILT)
        detail = ("Redis had lost the SKU; its rebuild is fenced behind the confirm queue (loaded by the "
                  "worker once the confirms accepted before the loss are in MySQL)" if fenced else
                  "Redis had no snapshot; loaded from MySQL under the lock")
        return [Finding(run=run, sku_id=sku_id, kind=Finding.Kind.SNAPSHOT_REBUILT, repaired=not fenced,
                        redis_value=after.redis_available if after and not after.missing else None,
                        mysql_value=first.sku.available_stock, detail=detail)]
    if first.redis_version is not None and first.redis_version < first.sku.version:
        # A sale-data push was lost: send it again (newest version wins in Redis).
        sku_sale_data_push(sku=first.sku)
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
    values = {"redis_value": second.redis_available, "mysql_value": second.sku.available_stock}
    why = (f"redis {second.redis_available}, mysql available {second.sku.available_stock}, "
           f"in flight {second.in_flight}, gives not applied {second.gives_unapplied}, "
           f"freezes taken {second.freezes_taken}")
    observation = uuid.uuid4().hex[:12]
    if second.drift > 0:
        # Redis above the truth could sell what MySQL does not have: lower now.
        _repair(run, sku_id, -d, why, observation, lease)
        _row(run, second, SkuReconciliation.State.REPAIRED)
        return [Finding(run=run, sku_id=sku_id, kind=Finding.Kind.DRIFT_LOWERED, repaired=True, **values,
                        detail=f"lowered by {d}: {why}"[:255])]
    previous = (SkuReconciliation.objects.filter(sku_id=sku_id, run__lt=run.pk).order_by("-run_id").first())
    if previous is not None and previous.drift < 0 and previous.state in (SkuReconciliation.State.DRIFT,
                                                                          SkuReconciliation.State.ALERT):
        # The same shortfall in the previous run and twice now: proof enough.
        d = min(d, abs(previous.drift))
        _repair(run, sku_id, d, why, observation, lease)
        _row(run, second, SkuReconciliation.State.REPAIRED)
        return [Finding(run=run, sku_id=sku_id, kind=Finding.Kind.DRIFT_RAISED, repaired=True, **values,
                        detail=f"raised by {d}: {why}"[:255])]
    _row(run, second, SkuReconciliation.State.ALERT)
    return [Finding(run=run, sku_id=sku_id, kind=Finding.Kind.DRIFT_ALERT, **values,
                    detail=f"Redis {d} below MySQL; raised only if the next run sees it too: {why}"[:255])]


def _repair(run: ReconciliationRun, sku_id: str, delta: int, why: str, observation: str,
            lease: Lease | None = None) -> None:
    """One idempotent change in Redis, keyed by run, SKU and observation (a call
    repeated after a lost reply applies once), and its REPAIR log row: made by
    inventory, which owns both (stock_repair). The lease is renewed first, so a
    run another one took over makes no repair from its stale measure."""
    if lease is not None:
        lease.hold()
    stock_services.stock_repair(sku_id=sku_id, repair_id=f"repair:{run.pk}:{sku_id}:{observation}", delta=delta,
                                why=why, actor="reconciliation")
    logger.warning("reconciliation %s repaired %s by %+d (%s)", run.pk, sku_id, delta, why)


def _row(run: ReconciliationRun, m: Measure, state: str) -> None:
    s = m.sku
    SkuReconciliation.objects.create(
        run=run, sku=s, redis_available=m.redis_available, mysql_available=s.available_stock,
        mysql_total=s.total_stock, mysql_frozen=s.frozen_stock, mysql_locked=s.locked_stock,
        mysql_sold=s.sold_stock, in_flight=m.in_flight, gives_unapplied=m.gives_unapplied + m.freezes_taken,
        expected_redis=m.expected, drift=m.drift, state=state)
