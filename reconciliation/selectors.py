"""Reads for the reconciliation pages, the admin and the metrics."""
from __future__ import annotations

from dataclasses import dataclass

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
