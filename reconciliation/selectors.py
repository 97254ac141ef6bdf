"""Reads for the reconciliation pages, the admin and the metrics."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta, tzinfo

from django.db.models import Count, Max, Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from inventory.models import Sku
from inventory.redis import live as redis_live, snapshots as redis_snapshots
from orders.models import Order, PaymentRefund
from reconciliation import charts
from reconciliation.models import Finding, ReconciliationRun, SkuReconciliation

# The report's charts cover this many recent runs and draw at most this many SKUs.
REPORT_RUNS = 50
REPORT_MAX_CHARTS = 24


def run_latest() -> ReconciliationRun | None:
    return ReconciliationRun.objects.filter(finished_at__isnull=False).first()


def run_findings(*, run: ReconciliationRun) -> list[Finding]:
    return list(run.findings.select_related("sku"))


def run_rows(*, run: ReconciliationRun) -> list[SkuReconciliation]:
    return list(run.rows.select_related("sku"))


def report_context(*, tz: tzinfo, sku_id: str | None = None, runs: int = REPORT_RUNS,
                   max_charts: int = REPORT_MAX_CHARTS) -> dict:
    """What the report page shows: the latest run, its rows and findings, the
    drift of each SKU over the recent runs (drifting SKUs first), one SKU's
    buckets over those runs, and the recent runs. Chart ticks are labelled in `tz`."""
    latest = run_latest()
    history = drift_history(runs=runs)
    order = sorted(history, key=lambda k: (-max(abs(s.value) for s in history[k]),
                                           not any(s.repaired for s in history[k]), k))
    bucket_sku = sku_id if sku_id in history else (order[0] if order else None)
    if bucket_sku in order:  # the SKU asked for is drawn first, whatever its drift
        order.remove(bucket_sku)
        order.insert(0, bucket_sku)
    return {
        "latest": latest,
        "rows": run_rows(run=latest) if latest else [],
        "findings": run_findings(run=latest) if latest else [],
        "drift_charts": charts.drift_charts({k: history[k] for k in order[:max_charts]}, tz=tz),
        "drift_hidden": max(0, len(order) - max_charts),
        "history_skus": sorted(history),
        "bucket_sku": bucket_sku,
        "bucket_chart": charts.bucket_chart(bucket_history(sku_id=bucket_sku, runs=runs), tz=tz)
        if bucket_sku else None,
        "history_runs": runs,
        "runs": list(ReconciliationRun.objects.all()[:20]),
    }


def metrics_lines() -> list[str]:
    """Prometheus text lines: runs, repairs, orphans, dead letters, open payment
    refunds, the age of the latest run and each SKU's drift at that run."""
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
        "# HELP seckill_dead_letters Dead letters waiting for ops (neither replayed nor discarded).",
        "# TYPE seckill_dead_letters gauge",
        f"seckill_dead_letters {dead_letters_count()}",
        "# HELP seckill_dead_letters_resolved Dead letters replayed or discarded, kept until their retention.",
        "# TYPE seckill_dead_letters_resolved gauge",
        f"seckill_dead_letters_resolved {DeadLetter.objects.exclude(status=DeadLetter.Status.OPEN).count()}",
        "# HELP seckill_payment_refunds_open Provider captures recorded as refunds and not closed yet.",
        "# TYPE seckill_payment_refunds_open gauge",
        f"seckill_payment_refunds_open {PaymentRefund.objects.filter(status=PaymentRefund.Status.TO_REFUND).count()}",
        "# HELP seckill_reconciliation_last_run_seconds Age of the latest finished run.",
        "# TYPE seckill_reconciliation_last_run_seconds gauge",
        (f"seckill_reconciliation_last_run_seconds "
         f"{(timezone.now() - latest.finished_at).total_seconds() if latest else -1:.0f}"),
        "# HELP seckill_sku_drift Redis available minus what MySQL implies, per SKU, at the latest run.",
        "# TYPE seckill_sku_drift gauge",
    ]
    if latest:
        for row in SkuReconciliation.objects.filter(run=latest).order_by("sku_id"):
            label = row.sku_id.replace("\\", "\\\\").replace('"', '\\"')
            lines.append(f'seckill_sku_drift{{sku="{label}"}} {row.drift}')
    return lines


# --- The live sale view (admin dashboard, polled) ------------------------------------------

# Order statuses the view counts, in this order (MySQL never holds PROCESSING).
DASHBOARD_STATUSES = ("PENDING_PAYMENT", "PAID", "CANCELLED", "EXPIRED", "FAILED")

# Plain reads only (no row lock), a bounded number of queries whatever the number
# of SKUs: one for the SKUs, one grouped count of their orders, one for their
# latest reconciliation rows, one count of dead letters; Redis in two pipelined
# round trips; the broker's queue depth over the process's probe connection.

LIVE_SKU_LIMIT = 50
# An ended SKU stays on the view this long after it ended (its last confirms).
LIVE_ENDED_WITHIN = timedelta(hours=1)
# Up to this many reservations in flight, the confirm lag is read exactly (every
# entry); beyond, from the ones whose orphan deadline comes first (a lower bound).
LIVE_LAG_EXACT_UPTO = 200
LIVE_LAG_CANDIDATES = 32

SALE_STATE_LABELS = {
    "on_sale": _("on sale"), "sold_out": _("sold out"), "upcoming": _("upcoming"),
    "ended": _("ended"), "paused": _("paused"), "active": _("active"),
    "rebuilding": _("rebuilding after a Redis loss"),
}


def live_skus(*, limit: int = LIVE_SKU_LIMIT) -> list[Sku]:
    """The SKUs on sale or recently active, the most recently changed first, bounded."""
    recent = timezone.now() - LIVE_ENDED_WITHIN
    return list(Sku.objects.filter(~Q(status=Sku.Status.ENDED) | Q(status_changed_at__gte=recent))
                .order_by("-updated_at", "sku_id")[:limit])


@dataclass(frozen=True)
class LiveRow:
    sku: Sku
    live: redis_live.LiveStock | None
    inflight: redis_live.InflightFigures
    orders_by_status: dict[str, int]
    check: SkuReconciliation | None  # the latest reconciliation row of this SKU
    now_ms: int
    fenced: bool = False  # Redis lost it; its rebuild waits behind the confirm queue

    @property
    def sale_state(self) -> str:
        from inventory.selectors import SkuView

        if self.fenced and self.live is None:
            return "rebuilding"
        return SkuView(sku=self.sku, live=self.live).sale_state

    @property
    def taken(self) -> int:
        """Reservations the gate accepted so far: the orders (every status; an
        order exists once confirmed) plus those still in flight. Rises with each
        accepted click; the page turns successive readings into clicks per second."""
        return sum(self.orders_by_status.values()) + self.inflight.reservations

    @property
    def confirm_lag_ms(self) -> int:
        if self.inflight.oldest_ms is None:
            return 0
        return max(0, self.now_ms - self.inflight.oldest_ms)

    @property
    def status_counts(self) -> list[int]:
        return [self.orders_by_status.get(s, 0) for s in DASHBOARD_STATUSES]

    def as_json(self) -> dict:
        from django.utils.formats import date_format

        sku, check = self.sku, self.check
        return {
            "sku_id": sku.sku_id,
            "name": sku.name,
            "sale_state": self.sale_state,
            "sale_state_label": str(SALE_STATE_LABELS.get(self.sale_state, self.sale_state)),
            "buckets": {"total": sku.total_stock, "available": sku.available_stock, "frozen": sku.frozen_stock,
                        "locked": sku.locked_stock, "sold": sku.sold_stock},
            "redis_available": self.live.available if self.live else None,
            "in_flight": self.inflight.reservations,
            "confirm_lag_ms": self.confirm_lag_ms,
            "confirm_lag_exact": self.inflight.exact,
            "taken": self.taken,
            "orders": dict(zip(DASHBOARD_STATUSES, self.status_counts)),
            "drift": None if check is None else {
                "value": check.drift, "state": check.state, "state_label": str(check.get_state_display()),
                "run_id": check.run_id,
                "at": date_format(timezone.localtime(check.run.finished_at or check.run.started_at),
                                  "DATETIME_FORMAT"),
            },
        }


def live_rows() -> tuple[list[LiveRow], int]:
    """The live SKUs with both stores' figures (no row lock) and Redis's clock (ms)."""
    skus = live_skus()
    ids = [s.sku_id for s in skus]
    if not ids:
        return [], int(timezone.now().timestamp() * 1000)
    counts: dict[str, dict[str, int]] = {}
    for row in Order.objects.filter(sku_id__in=ids).values("sku_id", "status").annotate(n=Count("pk")):
        counts.setdefault(row["sku_id"], {})[row["status"]] = row["n"]
    latest_ids = (SkuReconciliation.objects.filter(sku_id__in=ids).values("sku_id")
                  .annotate(last=Max("pk")).values("last"))
    checks = {c.sku_id: c for c in SkuReconciliation.objects.filter(pk__in=latest_ids).select_related("run")}
    live, inflight, now_ms = redis_live.inflight_figures(
        sku_ids=ids, exact_upto=LIVE_LAG_EXACT_UPTO, candidates=LIVE_LAG_CANDIDATES)
    fenced = redis_snapshots.fences_standing(sku_ids=[s for s in ids if live.get(s) is None])
    rows = [LiveRow(s, live.get(s.sku_id), inflight[s.sku_id], counts.get(s.sku_id, {}), checks.get(s.sku_id),
                    now_ms, s.sku_id in fenced) for s in skus]
    return sorted(rows, key=lambda r: r.sku.sku_id), now_ms


def dead_letters_count() -> int:
    """Dead letters still waiting for ops (not replayed or discarded yet)."""
    from inventory.models import DeadLetter

    return DeadLetter.objects.filter(status=DeadLetter.Status.OPEN).count()


def confirm_queue_depth() -> int | None:
    """Messages waiting in the confirm stream (every partition's summed); None
    when the broker cannot be asked."""
    from inventory.messages import broker_probe

    try:
        return broker_probe.confirm_queue_depth().messages
    except Exception:  # the page reports the broker as unreachable, it does not fail
        return None


def live_sale() -> dict:
    """Everything the live sale view shows, as JSON-ready data."""
    from django.utils.formats import date_format

    rows, now_ms = live_rows()
    return {
        "generated_at": date_format(timezone.localtime(), "DATETIME_FORMAT"),
        "now_ms": now_ms,
        "queue_depth": confirm_queue_depth(),
        "dead_letters": dead_letters_count(),
        "skus": [r.as_json() for r in rows],
    }


# --- The report's history (its charts) -------------------------------------------------

def history_run_ids(*, runs: int) -> list[int]:
    """The latest `runs` finished runs."""
    return list(ReconciliationRun.objects.filter(finished_at__isnull=False).values_list("pk", flat=True)[:runs])


def drift_history(*, runs: int = REPORT_RUNS) -> dict[str, list[charts.Sample]]:
    """Each SKU's drift at each of the recent runs (at the run's start), and
    whether that run repaired it."""
    rows = (SkuReconciliation.objects.filter(run_id__in=history_run_ids(runs=runs))
            .order_by("sku_id", "run__started_at", "run_id")
            .values_list("sku_id", "run_id", "run__started_at", "drift", "state"))
    repaired = (SkuReconciliation.State.REPAIRED, SkuReconciliation.State.REBUILT)
    out: dict[str, list[charts.Sample]] = {}
    for sku_id, run_id, at, drift, state in rows:
        out.setdefault(sku_id, []).append(charts.Sample(run_id, at, drift, state in repaired))
    return out


def bucket_history(*, sku_id: str, runs: int = REPORT_RUNS) -> list[charts.BucketSample]:
    """One SKU's MySQL buckets as each of the recent runs recorded them."""
    rows = (SkuReconciliation.objects.filter(run_id__in=history_run_ids(runs=runs), sku_id=sku_id)
            .order_by("run__started_at", "run_id")
            .values_list("run_id", "run__started_at", "mysql_available", "mysql_frozen", "mysql_locked",
                         "mysql_sold"))
    return [charts.BucketSample(*row) for row in rows]
