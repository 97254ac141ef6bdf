"""Reads for the reconciliation pages, the admin and the metrics."""
from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count

from inventory import redis_store
from inventory.models import Sku
from orders.models import Order
from reconciliation.models import Finding, ReconciliationRun, SkuReconciliation


def run_latest() -> ReconciliationRun | None:
    return ReconciliationRun.objects.filter(finished_at__isnull=False).first()


@dataclass(frozen=True)
class Series:
    sku_id: str
    points: list[tuple[int, int, bool]]  # (run id, drift, repaired)

    def svg(self, width: int = 420, height: int = 80) -> dict:
        """Coordinates for a server-rendered sparkline: drift around a zero line."""
        if not self.points:
            return {"polyline": "", "marks": [], "zero": height // 2, "max": 0}
        peak = max(1, max(abs(d) for _, d, _ in self.points))
        step = width / max(1, len(self.points) - 1)
        mid = height / 2
        coords = [(round(i * step, 1), round(mid - d / peak * (mid - 4), 1)) for i, (_, d, _) in enumerate(self.points)]
        marks = [c for c, (_, _, rep) in zip(coords, self.points) if rep]
        return {"polyline": " ".join(f"{x},{y}" for x, y in coords), "marks": marks, "zero": mid, "max": peak}


def drift_series(*, runs: int = 50) -> list[Series]:
    ids = list(ReconciliationRun.objects.filter(finished_at__isnull=False).values_list("pk", flat=True)[:runs])
    rows = (SkuReconciliation.objects.filter(run_id__in=ids).order_by("sku_id", "run_id")
            .values_list("sku_id", "run_id", "drift", "state"))
    series: dict[str, list[tuple[int, int, bool]]] = {}
    for sku_id, run_id, drift, state in rows:
        series.setdefault(sku_id, []).append((run_id, drift, state in ("repaired", "rebuilt")))
    return [Series(k, v) for k, v in sorted(series.items())]


def run_findings(*, run: ReconciliationRun) -> list[Finding]:
    return list(run.findings.select_related("sku"))


def run_rows(*, run: ReconciliationRun) -> list[SkuReconciliation]:
    return list(run.rows.select_related("sku"))


def report_context() -> dict:
    """What the report page shows: the latest run, its rows and findings, the
    drift of each SKU over the recent runs, and the recent runs."""
    latest = run_latest()
    return {
        "latest": latest,
        "rows": run_rows(run=latest) if latest else [],
        "findings": run_findings(run=latest) if latest else [],
        "series": drift_series(),
        "runs": list(ReconciliationRun.objects.all()[:20]),
    }


def metrics_lines() -> list[str]:
    """Prometheus text lines: runs, repairs, orphans, dead letters, the age of
    the latest run and each SKU's drift at that run."""
    from django.db.models import Sum
    from django.utils import timezone

    from inventory.models import DeadLetter

    latest = run_latest()
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
    return lines


# --- The stock dashboard ---------------------------------------------------------------

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
    """Live SKUs with both stores' figures and their orders by status (one
    grouped query, no row lock)."""
    skus = list(Sku.objects.exclude(status=Sku.Status.ENDED).order_by("sku_id"))
    counts: dict[str, dict[str, int]] = {}
    for row in Order.objects.filter(sku__in=skus).values("sku_id", "status").annotate(n=Count("pk")):
        counts.setdefault(row["sku_id"], {})[row["status"]] = row["n"]
    live = redis_store.live_stock_many(sku_ids=[s.sku_id for s in skus]) if skus else {}
    return [DashboardRow(s, live.get(s.sku_id), counts.get(s.sku_id, {})) for s in skus]
