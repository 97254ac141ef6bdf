"""The reconciliation report for people (staff) and its metrics for machines."""
from __future__ import annotations

import hmac

from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.db.models import Count, Sum
from django.http import HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from inventory.models import DeadLetter
from reconciliation import selectors
from reconciliation.models import ReconciliationRun, SkuReconciliation


@staff_member_required
def report(request):
    latest = selectors.run_latest()
    context = {
        "latest": latest,
        "rows": list(latest.rows.select_related("sku")) if latest else [],
        "findings": selectors.run_findings(run=latest) if latest else [],
        "series": selectors.drift_series(),
        "runs": ReconciliationRun.objects.all()[:20],
    }
    return render(request, "reconciliation/report.html", context)


@staff_member_required
def run_detail(request, run_id: int):
    run = get_object_or_404(ReconciliationRun, pk=run_id)
    return render(request, "reconciliation/run.html", {
        "run": run, "rows": list(run.rows.select_related("sku")), "findings": selectors.run_findings(run=run)})


def metrics(request):
    """Prometheus text format. A bearer token (SECKILL_METRICS_TOKEN) or a staff login."""
    token = settings.SECKILL_METRICS_TOKEN
    presented = request.META.get("HTTP_AUTHORIZATION", "").removeprefix("Bearer ").strip()
    # Bytes, not str: a header with non-ASCII characters is refused, not an error.
    allowed = (token and hmac.compare_digest(presented.encode("utf-8", "replace"), token.encode())) or (
        request.user.is_authenticated and request.user.is_staff)
    if not allowed:
        return HttpResponseForbidden("metrics: bearer token or staff login required\n")
    latest = selectors.run_latest()
    totals = ReconciliationRun.objects.aggregate(n=Count("pk"), repairs=Sum("repairs"), orphans=Sum("orphans"))
    lines = [
        "# HELP seckill_reconciliation_runs_total Reconciliation runs recorded.",
        "# TYPE seckill_reconciliation_runs_total counter",
        f"seckill_reconciliation_runs_total {totals['n'] or 0}",
        "# HELP seckill_reconciliation_repairs_total Repairs made by reconciliation.",
        "# TYPE seckill_reconciliation_repairs_total counter",
        f"seckill_reconciliation_repairs_total {totals['repairs'] or 0}",
        "# HELP seckill_reconciliation_orphans_total Orphan reservations published again.",
        "# TYPE seckill_reconciliation_orphans_total counter",
        f"seckill_reconciliation_orphans_total {totals['orphans'] or 0}",
        "# HELP seckill_dead_letters Messages waiting in the dead-letter table.",
        "# TYPE seckill_dead_letters gauge",
        f"seckill_dead_letters {DeadLetter.objects.count()}",
        "# HELP seckill_reconciliation_last_run_seconds Age of the latest finished run.",
        "# TYPE seckill_reconciliation_last_run_seconds gauge",
        f"seckill_reconciliation_last_run_seconds "
        f"{(timezone.now() - latest.finished_at).total_seconds() if latest else -1:.0f}",
        "# HELP seckill_sku_drift Redis available minus what MySQL implies, per SKU, at the latest run.",
        "# TYPE seckill_sku_drift gauge",
    ]
    if latest:
        for row in SkuReconciliation.objects.filter(run=latest).order_by("sku_id"):
            label = row.sku_id.replace("\\", "\\\\").replace('"', '\\"')
            lines.append(f'seckill_sku_drift{{sku="{label}"}} {row.drift}')
    return HttpResponse("\n".join(lines) + "\n", content_type="text/plain; version=0.0.4")
