"""Geometry of the report's charts: pure Python (no ORM, no templates).

The report draws its charts as inline SVG on the server, so this module turns
run samples into pixel coordinates and axis ticks; the templates only place
them and add the translated words. Tick labels are wall-clock times in the
time zone the caller passes (the active one), so a reader in Shanghai sees
Shanghai times.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo

# Candidate tick steps, in seconds: the smallest one giving at most `target`
# ticks is used, so labels never crowd.
TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200,
              86400, 2 * 86400, 7 * 86400, 14 * 86400, 28 * 86400, 56 * 86400, 112 * 86400, 364 * 86400)
DAY = 86400
# A single run (or runs in the same second) still gets a readable axis around it.
MIN_SPAN = timedelta(seconds=60)


@dataclass(frozen=True)
class Tick:
    pos: float  # pixels along the axis
    label: str
    at: datetime | None = None  # the instant, for time ticks


@dataclass(frozen=True)
class Frame:
    """The plot area inside an SVG of width x height, and its axes."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    x_ticks: list[Tick]
    y_ticks: list[Tick]

    @property
    def x0(self) -> int:
        return self.left

    @property
    def x1(self) -> int:
        return self.width - self.right

    @property
    def y0(self) -> int:  # the bottom of the plot area (SVG y grows downwards)
        return self.height - self.bottom

    @property
    def y1(self) -> int:
        return self.top

    @property
    def mid_x(self) -> float:
        return (self.x0 + self.x1) / 2

    @property
    def mid_y(self) -> float:
        return (self.y0 + self.y1) / 2


@dataclass(frozen=True)
class Sample:
    """One SKU's figure at one run."""

    run_id: int
    at: datetime  # aware
    value: int
    repaired: bool = False


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    sample: Sample | BucketSample

    @property
    def triangle(self) -> str:
        """An upward triangle around the point, for a repair marker."""
        x, y = self.x, self.y
        return f"{x:.1f},{y - 6:.1f} {x - 5.5:.1f},{y + 4:.1f} {x + 5.5:.1f},{y + 4:.1f}"


@dataclass(frozen=True)
class LineChart:
    key: str
    frame: Frame
    points: list[Point]
    zero_y: float
    peak: int  # the largest |value| drawn

    @property
    def polyline(self) -> str:
        return " ".join(f"{p.x:.1f},{p.y:.1f}" for p in self.points)

    @property
    def repairs(self) -> list[Point]:
        return [p for p in self.points if p.sample.repaired]


@dataclass(frozen=True)
class BucketSample:
    run_id: int
    at: datetime
    available: int
    frozen: int
    locked: int
    sold: int

    @property
    def total(self) -> int:
        return self.available + self.frozen + self.locked + self.sold


# Stacked from the bottom: what is gone for good first, what is still for sale on top,
# so the top edge is the SKU's total.
BUCKETS = ("sold", "locked", "frozen", "available")


@dataclass(frozen=True)
class Band:
    key: str
    polygon: str


@dataclass(frozen=True)
class BucketChart:
    frame: Frame
    bands: list[Band]
    points: list[Point]  # on the top edge (the total), one per run, for the tooltips


# --- axes ------------------------------------------------------------------------------

def time_ticks(start: datetime, end: datetime, *, tz: tzinfo, target: int = 6) -> list[tuple[datetime, str]]:
    """Round wall-clock instants in `tz` between start and end, with their labels.

    The first label, and any whose local date differs from the previous one,
    carries the date; the others only the time."""
    span = (end - start).total_seconds()
    step = next((s for s in TIME_STEPS if span / s <= target), TIME_STEPS[-1])
    lo, hi = start.astimezone(tz).replace(tzinfo=None), end.astimezone(tz).replace(tzinfo=None)
    # Steps are counted in local wall-clock time from local midnight, so ticks fall
    # on 10:00, 10:15 ... of the reader's clock whatever the zone's offset.
    midnight = lo.replace(hour=0, minute=0, second=0, microsecond=0)
    if step < DAY:
        n = math.ceil((lo - midnight).total_seconds() / step)
        t = midnight + timedelta(seconds=n * step)
    else:
        t = midnight if lo == midnight else midnight + timedelta(days=1)
    fmt = "%H:%M:%S" if step < 60 else "%H:%M"
    out: list[tuple[datetime, str]] = []
    previous_date = None
    while t <= hi:
        aware = t.replace(tzinfo=tz)
        if step >= DAY:
            label = t.strftime("%Y-%m-%d")
        elif t.date() != previous_date:
            label = t.strftime(f"%m-%d {fmt}")
        else:
            label = t.strftime(fmt)
        previous_date = t.date()
        out.append((aware, label))
        t += timedelta(seconds=step)
    return out


def value_ticks(lo: int, hi: int, *, target: int = 5) -> tuple[int, int, list[int]]:
    """A nice integer step (1, 2, 5 x 10^k) and the domain widened to it."""
    if lo == hi:
        hi = lo + 1
    raw = (hi - lo) / target
    magnitude = 10 ** max(0, math.floor(math.log10(raw))) if raw >= 1 else 1
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    lo, hi = math.floor(lo / step) * step, math.ceil(hi / step) * step
    return lo, hi, list(range(lo, hi + 1, step))


def _time_domain(times: list[datetime]) -> tuple[datetime, datetime]:
    start, end = min(times), max(times)
    if end - start < MIN_SPAN:
        pad = (MIN_SPAN - (end - start)) / 2
        start, end = start - pad, end + pad
    return start, end


def _frame(*, width: int, height: int, start: datetime, end: datetime, y_lo: int, y_hi: int,
           y_values: list[int], tz: tzinfo, left: int = 52, right: int = 16, top: int = 12,
           bottom: int = 42) -> tuple[Frame, Callable[[datetime], float], Callable[[float], float]]:
    span = (end - start).total_seconds()
    plot_w, plot_h = width - left - right, height - top - bottom

    def x_of(at: datetime) -> float:
        return round(left + (at - start).total_seconds() / span * plot_w, 1)

    def y_of(v: float) -> float:
        return round(top + (y_hi - v) / (y_hi - y_lo) * plot_h, 1)

    target = max(2, plot_w // 110)  # a label needs about 110 px
    x_ticks = [Tick(x_of(at), label, at) for at, label in time_ticks(start, end, tz=tz, target=target)]
    y_ticks = [Tick(y_of(v), str(v)) for v in y_values]
    return Frame(width, height, left, right, top, bottom, x_ticks, y_ticks), x_of, y_of


# --- charts ----------------------------------------------------------------------------

def drift_charts(histories: dict[str, list[Sample]], *, tz: tzinfo, width: int = 460,
                 height: int = 170) -> list[LineChart]:
    """One small chart per SKU, all on the same time axis (the runs shown), so
    they read side by side. Each has its own vertical scale around zero."""
    times = [s.at for samples in histories.values() for s in samples]
    if not times:
        return []
    start, end = _time_domain(times)
    charts = []
    for key, samples in histories.items():
        samples = sorted(samples, key=lambda s: (s.at, s.run_id))
        values = [s.value for s in samples] or [0]
        # at least -1..1, so a SKU that never drifted has its zero line in the middle
        y_lo, y_hi, y_values = value_ticks(min(-1, *values), max(1, *values), target=4)
        frame, x_of, y_of = _frame(width=width, height=height, start=start, end=end, y_lo=y_lo, y_hi=y_hi,
                                   y_values=y_values, tz=tz)
        points = [Point(x_of(s.at), y_of(s.value), s) for s in samples]
        charts.append(LineChart(key, frame, points, y_of(0), max(abs(v) for v in values)))
    return charts


def bucket_chart(samples: list[BucketSample], *, tz: tzinfo, width: int = 940,
                 height: int = 260) -> BucketChart | None:
    """The four buckets of one SKU stacked over the runs (top edge = total)."""
    if not samples:
        return None
    samples = sorted(samples, key=lambda s: (s.at, s.run_id))
    start, end = _time_domain([s.at for s in samples])
    y_lo, y_hi, y_values = value_ticks(0, max(s.total for s in samples), target=5)
    frame, x_of, y_of = _frame(width=width, height=height, start=start, end=end, y_lo=y_lo, y_hi=y_hi,
                               y_values=y_values, tz=tz)
    xs = [x_of(s.at) for s in samples]
    if len(xs) == 1:  # one run: a bar, an area of no width would not show
        xs, samples = [xs[0] - 8, xs[0] + 8], samples * 2
    bands, floor = [], [0] * len(samples)
    for key in BUCKETS:
        ceiling = [f + getattr(s, key) for f, s in zip(floor, samples)]
        upper = [f"{x:.1f},{y_of(c):.1f}" for x, c in zip(xs, ceiling)]
        lower = [f"{x:.1f},{y_of(f):.1f}" for x, f in zip(reversed(xs), reversed(floor))]
        bands.append(Band(key, " ".join(upper + lower)))
        floor = ceiling
    unique = {s.run_id: s for s in samples}.values()
    points = [Point(x_of(s.at), y_of(s.total), s) for s in unique]
    return BucketChart(frame, bands, points)
