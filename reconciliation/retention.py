"""The retention sweep (beat, `reconciliation.tasks.retention_sweep_task`):
rows past SECKILL_RETENTION_DAYS that nothing depends on are deleted, each app
deleting its own tables; the Redis keys of ended SKUs go after their grace.

Kept for good: orders and refunds (orders), SKU rows and the inventory log
(inventory): the audit trail. Reconciliation deletes its runs with their
per-SKU rows, findings and alerts, except a recent run whose finding still
waits for its alert, and the alerts of the dead letters inventory deletes.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from accounts.retention import login_records_purge
from inventory.services.retention import (
    RETENTION_CAP,
    RETENTION_CHUNK,
    dead_letters_resolved,
    inventory_retention_sweep,
    rows_delete_chunked,
)
from reconciliation.alerts import ALERT_KINDS, LOOKBACK
from reconciliation.models import Alert, Finding, ReconciliationRun, SkuReconciliation

# Runs whose children are deleted together (each child table still in chunks).
RUNS_PER_PASS = 100
# A run that never finished (its process died) is deleted this long after the retention.
UNFINISHED_RUN_SLACK = timedelta(hours=1)


def retention_cutoff() -> datetime:
    return timezone.now() - timedelta(days=settings.SECKILL_RETENTION_DAYS)


def runs_old(*, before: datetime):
    """Runs finished before `before` (or started before it and never finished),
    except one whose alert-kind finding is still waiting for its alert."""
    waiting = Finding.objects.filter(run=OuterRef("pk"), kind__in=ALERT_KINDS, alert__isnull=True,
                                     run__started_at__gte=timezone.now() - LOOKBACK)
    return (ReconciliationRun.objects
            .filter(Q(finished_at__lt=before) | Q(finished_at__isnull=True,
                                                  started_at__lt=before - UNFINISHED_RUN_SLACK))
            .exclude(Exists(waiting)))


def runs_purge(*, before: datetime, cap: int = RETENTION_CAP) -> dict[str, int]:
    """Delete old runs: their per-SKU rows, their findings' alerts, their
    findings, then the runs, each table by primary key in chunks."""
    out = {"runs": 0, "sku_rows": 0, "findings": 0, "finding_alerts": 0}
    while out["runs"] < cap:
        ids = list(runs_old(before=before).order_by("pk").values_list("pk", flat=True)[:RUNS_PER_PASS])
        if not ids:
            break
        out["sku_rows"] += rows_delete_chunked(rows=SkuReconciliation.objects.filter(run_id__in=ids))
        out["finding_alerts"] += rows_delete_chunked(rows=Alert.objects.filter(finding__run_id__in=ids))
        out["findings"] += rows_delete_chunked(rows=Finding.objects.filter(run_id__in=ids))
        out["runs"] += rows_delete_chunked(rows=ReconciliationRun.objects.filter(pk__in=ids))
    return out


def retention_sweep(*, grace_s: float | None = None) -> dict[str, int]:
    """One pass of the retention sweep; bounded per table (RETENTION_CAP rows
    in chunks of RETENTION_CHUNK), the rest is left to the next pass."""
    before = retention_cutoff()
    out = {"dead_letter_alerts": rows_delete_chunked(
        rows=Alert.objects.filter(dead_letter__in=dead_letters_resolved(before=before)), chunk=RETENTION_CHUNK)}
    out.update(inventory_retention_sweep(before=before, grace_s=grace_s))
    out.update(runs_purge(before=before))
    out.update(login_records_purge(before=before))
    return out
