"""The report's chart geometry (pure) and its template include, in-process."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from django.template.loader import render_to_string
from django.utils import timezone as dj_timezone

from reconciliation import charts

SHANGHAI = ZoneInfo("Asia/Shanghai")
T0 = datetime(2026, 11, 30, 11, 37, 41, tzinfo=UTC)  # 19:37:41 in Shanghai


def history() -> dict[str, list[charts.Sample]]:
    return {"A": [charts.Sample(1, T0, 0), charts.Sample(2, T0 + timedelta(minutes=5), -4),
                  charts.Sample(3, T0 + timedelta(minutes=10), -4, repaired=True),
                  charts.Sample(4, T0 + timedelta(minutes=15), 0)],
            "B": [charts.Sample(3, T0 + timedelta(minutes=10), 2)]}


def test_time_ticks_are_in_order_on_round_local_times_and_labelled_in_that_zone():
    ticks = charts.time_ticks(T0, T0 + timedelta(minutes=15), tz=SHANGHAI, target=6)
    instants = [at for at, _ in ticks]
    assert instants == sorted(instants) and len(set(instants)) == len(instants) >= 3
    assert all(T0 <= at <= T0 + timedelta(minutes=15) for at in instants)
    local = [at.astimezone(SHANGHAI) for at in instants]
    assert all(t.utcoffset() == timedelta(hours=8) for t in local)
    # round steps of the reader's clock, and the label is that clock's reading
    assert all(t.second == 0 and t.minute % 5 == 0 for t in local)
    assert ticks[0][1] == local[0].strftime("%m-%d %H:%M") and ticks[0][1].startswith("11-30 19:")
    assert [label for _, label in ticks[1:]] == [t.strftime("%H:%M") for t in local[1:]]


def test_time_ticks_carry_the_date_when_the_local_day_changes_and_use_days_for_long_spans():
    evening = datetime(2026, 11, 30, 15, 0, tzinfo=UTC)  # 23:00 in Shanghai
    labels = [label for _, label in charts.time_ticks(evening, evening + timedelta(hours=2), tz=SHANGHAI)]
    assert labels[0].startswith("11-30 ") and "12-01 00:00" in labels
    long = charts.time_ticks(T0, T0 + timedelta(days=20), tz=SHANGHAI)
    assert all(at.astimezone(SHANGHAI).hour == 0 for at, _ in long) and long[0][1].startswith("2026-12-")


def test_value_ticks_are_round_integers_covering_the_values():
    assert charts.value_ticks(-4, 1, target=4) == (-4, 2, [-4, -2, 0, 2])
    assert charts.value_ticks(0, 1234) == (0, 1500, [0, 500, 1000, 1500])
    assert charts.value_ticks(0, 0) == (0, 1, [0, 1])


def test_drift_charts_share_the_time_axis_and_mark_the_repair_run():
    a, b = charts.drift_charts(history(), tz=SHANGHAI)
    assert a.frame.x_ticks == b.frame.x_ticks  # small multiples read side by side
    xs = [p.x for p in a.points]
    assert xs == sorted(xs) and a.frame.x0 <= xs[0] and xs[-1] <= a.frame.x1
    assert [p.sample.run_id for p in a.repairs] == [3]
    assert a.points[1].y > a.zero_y  # negative drift is drawn below the zero line
    assert a.points[0].y == a.zero_y == a.points[3].y and a.peak == 4
    y_labels = [t.label for t in a.frame.y_ticks]
    assert "0" in y_labels and int(y_labels[0]) <= -4
    assert b.points[0].x == a.points[2].x  # the same run, the same place


def test_a_single_run_is_placed_inside_a_readable_axis():
    (chart,) = charts.drift_charts({"A": [charts.Sample(7, T0, 0)]}, tz=SHANGHAI)
    assert chart.frame.x0 < chart.points[0].x < chart.frame.x1
    assert len(chart.frame.x_ticks) >= 2 and len(chart.frame.y_ticks) >= 2


def test_bucket_chart_stacks_the_four_buckets_up_to_the_total():
    samples = [charts.BucketSample(1, T0, 9, 0, 0, 1), charts.BucketSample(2, T0 + timedelta(minutes=5), 5, 2, 1, 2)]
    chart = charts.bucket_chart(samples, tz=SHANGHAI)
    assert [b.key for b in chart.bands] == ["sold", "locked", "frozen", "available"]
    assert [p.sample.total for p in chart.points] == [10, 10]
    top = chart.frame.y_ticks[-1]
    assert int(top.label) >= 10
    assert charts.bucket_chart([], tz=SHANGHAI) is None


def test_the_include_draws_labelled_axes_and_a_repair_marker_with_local_times():
    with dj_timezone.override(SHANGHAI):
        html = render_to_string("reconciliation/_drift_charts.html",
                                {"drift_charts": charts.drift_charts(history(), tz=SHANGHAI), "drift_hidden": 0})
    assert 'id="series-A"' in html and "<polyline" in html and 'class="x-tick"' in html
    assert "drift (units)" in html and "run start time (Asia/Shanghai)" in html
    repaired_at = (T0 + timedelta(minutes=10)).astimezone(SHANGHAI).strftime("%Y-%m-%d %H:%M:%S")
    assert f"Run #3 at {repaired_at} repaired a drift of -4" in html
    assert "UTC" not in html


def test_an_empty_history_says_no_runs_yet_instead_of_drawing():
    html = render_to_string("reconciliation/_drift_charts.html", {"drift_charts": charts.drift_charts({}, tz=SHANGHAI)})
    assert "No runs yet" in html and "<svg" not in html
    html = render_to_string("reconciliation/_bucket_chart.html", {"bucket_chart": None})
    assert "No runs yet" in html and "<svg" not in html
