"""One row per run and the matrix's last lines: the table, the figures per
fault on a cluster, and the key=value summary (docs/failures.md says what each
column and key means; keys are only ever added)."""
from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from benchmarks.chaos.plan import CLUSTER_FAULTS, GALERA_FAULTS, HOST_FAULTS, NETWORK_FAULTS, NETWORK_LOSSES


@dataclass
class Row:
    """One run's figures, as its table row shows them."""

    name: str
    attempted: int = 0
    accepted: int = 0
    confirmed: int = 0
    failed202: int = 0
    lost: int = 0
    duplicated: int = 0
    oversold: int = 0
    drift: int | None = None
    in_flight: str = "-"
    drain_s: float = 0.0
    pause_s: float | None = None
    other_pause_s: float | None = None  # the longest first sale after the loss on a SKU of another master
    n503: int | None = None
    node: str = "-"
    paused: str = "-"
    confirm_gap_s: float | None = None
    pays: int | None = None           # pays and cancels answered 200 (the payers, --cluster)
    pay503: int | None = None         # pays and cancels answered 503
    pay_pause_s: float | None = None  # from a fault to the first pay or cancel answered 200 sent after it
    ok: bool = True
    note: str = ""
    redis_loss: bool = False
    faults: tuple[str, ...] = ()


COLUMNS = ("attempted", "accepted", "confirmed", "failed202", "lost", "duplicated", "oversold", "drift",
           "in_flight", "drain_s", "pause_s", "n503", "confirm_gap_s")
CLUSTER_COLUMNS = COLUMNS + ("other_pause_s", "node", "paused", "pays", "pay503", "pay_pause_s")


def width(column: str) -> int:
    return max(10, len(column))


def cell(row: Row, column: str) -> str:
    """One table cell, ten wide (or its header's width): seconds to one decimal, "-" for nothing."""
    value, w = getattr(row, column), width(column)
    if value is None:
        return f"{'-':>{w}}"
    return f"{value:>{w}.1f}" if isinstance(value, float) else f"{str(value):>{w}}"


def _figure_of(rows: list[Row], name: str, value: Callable[[Row], float | None], what: str) -> str:
    """A fault's figure over the runs it was in: median and max, and alone."""
    figures = [value(r) for r in rows if value(r) is not None]
    text = (f"median {statistics.median(figures):.1f} s, max {max(figures):.1f} s" if figures
            else f"no {what} measured")
    alone = [value(r) for r in rows if r.faults == (name,) and value(r) is not None]
    if alone:
        text += f" (alone {', '.join(f'{g:.1f}' for g in alone)} s)"
    return text


def gaps_by_fault(rows: list[Row]) -> list[str]:
    """Per host fault: the confirm gap (median, max) of the runs it was in, and what each hit."""
    out = []
    for name in HOST_FAULTS + tuple(n for n in NETWORK_FAULTS if n not in NETWORK_LOSSES):
        mine = [r for r in rows if name in r.faults]
        if mine:
            figures = _figure_of(mine, name, lambda r: r.confirm_gap_s, "confirm")
            out.append(f"{name}: {len(mine)} runs, confirm gap {figures}; hit {' '.join(r.node for r in mine)}")
    return out


def database_by_fault(rows: list[Row]) -> list[str]:
    """Per database fault: its confirm gap, pay pause and pays answered 503 over the runs it was in."""
    out = []
    for name in GALERA_FAULTS:
        mine = [r for r in rows if name in r.faults]
        if mine:
            gap = _figure_of(mine, name, lambda r: r.confirm_gap_s, "confirm")
            pay = _figure_of(mine, name, lambda r: r.pay_pause_s, "pay")
            n503 = " ".join(str(r.pay503 if r.pay503 is not None else "-") for r in mine)
            out.append(f"{name}: {len(mine)} runs, confirm gap {gap}; pay pause {pay}; pays answered 503 {n503}; "
                       f"hit {' '.join(r.node for r in mine)}")
    return out


def pauses_by_fault(rows: list[Row]) -> list[str]:
    """Per cluster fault: the pause (median, max) of the runs it was in (and of
    the run of it alone), the nodes and how many of each sale's SKUs paused."""
    out = []
    for name in CLUSTER_FAULTS + NETWORK_LOSSES:
        mine = [r for r in rows if name in r.faults]
        if mine:
            figures = _figure_of(mine, name, lambda r: r.pause_s, "pause")
            others = _figure_of(mine, name, lambda r: r.other_pause_s, "pause")
            out.append(f"{name}: {len(mine)} runs, pause {figures}; on other masters {others}; "
                       f"nodes {' '.join(r.node for r in mine)}; SKUs paused {' '.join(r.paused for r in mine)}")
    return out


def summary(rows: list[Row], *, redis_base: int | None, broker: str, partitions: int,
            database: str = "single") -> str:
    """The last line: the sums over the runs, the pauses' and confirm gaps' max
    and median, what the matrix ran on, and the verdict."""
    total = {k: sum(getattr(r, k) for r in rows) for k in ("attempted", "accepted", "lost", "oversold", "failed202")}
    failed_clean = sum(r.failed202 for r in rows if not r.redis_loss)
    dup_clean = sum(r.duplicated for r in rows if not r.redis_loss)
    dup_loss = sum(r.duplicated for r in rows if r.redis_loss)
    drift = sum(abs(r.drift or 0) for r in rows)
    pause_max, pause_median = _max_median([r.pause_s for r in rows if r.pause_s is not None])
    gap_max, gap_median = _max_median([r.confirm_gap_s for r in rows if r.confirm_gap_s is not None])
    redis_kind = f" redis=cluster:{redis_base}" if redis_base else ""
    pay_max, pay_median = _max_median([r.pay_pause_s for r in rows if r.pay_pause_s is not None])
    pay503 = sum(r.pay503 or 0 for r in rows)
    return (f"runs={len(rows)} attempted={total['attempted']} accepted={total['accepted']} "
            f"failed_after_202={total['failed202']} failed_after_202_without_redis_loss={failed_clean} "
            f"duplicated_after_redis_loss={dup_loss} drift={drift} lost={total['lost']} "
            f"oversold={total['oversold']} duplicated={dup_clean} pause_s_max={pause_max} "
            f"pause_s_median={pause_median}{redis_kind} confirm_gap_s_max={gap_max} "
            f"confirm_gap_s_median={gap_median} broker={broker} partitions={partitions} "
            f"database={database} pay503={pay503} pay_pause_s_max={pay_max} pay_pause_s_median={pay_median} "
            f"verdict={'ok' if all(r.ok for r in rows) else 'FAIL'}")


def _max_median(figures: list[float]) -> tuple[str, str]:
    return (f"{max(figures):.1f}", f"{statistics.median(figures):.1f}") if figures else ("-", "-")
