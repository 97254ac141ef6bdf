"""celery beat outlives a database that goes away (seckill_site.beat)."""
from __future__ import annotations

import time
from datetime import datetime, timedelta
from unittest import mock

import pytest
from django.db import OperationalError


def test_a_database_error_in_a_tick_keeps_beat_running(live_db):
    from django_celery_beat.schedulers import DatabaseScheduler as Upstream

    from seckill_site.beat import RETRY_S, DatabaseScheduler
    from seckill_site.celery import app

    scheduler = DatabaseScheduler(app=app)
    before = dict(scheduler.schedule)
    assert before, "the schedule should have entries (data migration)"

    def due_for_a_full_read():
        scheduler._last_full_sync = datetime.now() - timedelta(hours=1)  # noqa: DTZ005 - upstream keeps naive local time

    gone = OperationalError(2002, "Can't connect to server on '127.0.0.1' (115)")
    with mock.patch.object(Upstream, "all_as_schedule", side_effect=gone):
        due_for_a_full_read()
        with pytest.raises(OperationalError):
            Upstream.tick(scheduler)  # upstream: the error leaves tick, and celery beat exits
        due_for_a_full_read()
        assert DatabaseScheduler.tick(scheduler) == RETRY_S  # ours: waits a moment instead
    # the database is back: the schedule it had is still there and ticks go on
    assert set(scheduler.schedule) == set(before)
    assert scheduler.tick() >= 0


# --- Which sweeps beat holds, and since when (the health figure "beat") -------------------

@pytest.fixture
def beat_records(live_db):
    """A clean slate of the sweep and beat records in this run's Redis db, put
    back empty afterwards (a stale held record would change other tests' health)."""
    from core.redis.connection import redis
    from inventory.redis import keys as redis_keys, liveness

    keys = (redis_keys.SWEEPS_KEY, redis_keys.BEAT_STARTED_KEY, redis_keys.BEAT_HELD_KEY)
    redis().delete(*keys)
    yield liveness
    redis().delete(*keys)


def _late() -> set[str]:
    from inventory import health

    out = health._beat()
    return set() if out is None else set(out.removeprefix("error: late: ").split(", "))


def _as_if(*, seconds_ago: float, tasks=None) -> None:
    """Move beat's records back in time (Redis keeps no clock of ours to fake)."""
    from core.redis.connection import redis
    from inventory.redis.keys import BEAT_HELD_KEY, BEAT_STARTED_KEY

    r = redis()
    then = int((time.time() - seconds_ago) * 1000)
    r.set(BEAT_STARTED_KEY, then)
    for task in tasks if tasks is not None else r.hkeys(BEAT_HELD_KEY):
        r.hset(BEAT_HELD_KEY, task, then)


def _enabled_sweeps() -> dict[str, int]:
    from django_celery_beat.models import PeriodicTask

    return {t.task: t.interval.every for t in PeriodicTask.objects.filter(enabled=True, interval__isnull=False)
            .select_related("interval") if t.interval.period == "seconds"}


def test_right_after_beat_starts_no_sweep_is_late_and_each_is_after_three_intervals(beat_records):
    from seckill_site.beat import DatabaseScheduler
    from seckill_site.celery import app

    liveness = beat_records
    sweeps = _enabled_sweeps()
    assert len(sweeps) >= 5
    assert _late() == {t.rsplit(".", 1)[-1] for t in sweeps}  # no beat has ever said anything: all late

    DatabaseScheduler(app=app).tick()  # a fresh start: nothing ran yet
    started, held = liveness.beat_schedule_read()
    assert started is not None and set(sweeps) <= set(held)
    assert _late() == set()  # the old rule: every sweep late until it ran once

    # Beat started two intervals of the slowest sweep ago: only the faster ones
    # are due by now, and those that ran are fine.
    slowest = max(sweeps, key=sweeps.get)
    _as_if(seconds_ago=2 * sweeps[slowest])
    late = _late()
    assert slowest.rsplit(".", 1)[-1] not in late
    assert late == {t.rsplit(".", 1)[-1] for t, every in sweeps.items() if 3 * every + 2 < 2 * sweeps[slowest]}
    for task in sweeps:
        if task != slowest:
            liveness.sweep_ran(task=task)
    assert _late() == set()
    _as_if(seconds_ago=3 * sweeps[slowest] + 5)
    assert _late() == {slowest.rsplit(".", 1)[-1]}


def test_a_sweep_enabled_later_is_measured_from_when_beat_took_it_up(beat_records):
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    from core.redis.connection import redis
    from inventory.redis.keys import SWEEPS_KEY
    from seckill_site.beat import DatabaseScheduler
    from seckill_site.celery import app

    liveness = beat_records
    scheduler = DatabaseScheduler(app=app)
    scheduler.tick()
    _as_if(seconds_ago=7200)  # beat has run for two hours, every sweep with it
    for task in _enabled_sweeps():
        liveness.sweep_ran(task=task)
    hourly, _ = IntervalSchedule.objects.get_or_create(every=600, period=IntervalSchedule.SECONDS)
    added = PeriodicTask.objects.create(name="test: a sweep added later", task="tests.a_new_sweep_task",
                                        interval=hourly, enabled=True)
    try:
        assert _late() == {"a_new_sweep_task"}  # no record yet of beat holding it
        scheduler._held_at = None  # the refresh is due (every HELD_REFRESH_S)
        scheduler.tick()
        assert _late() == set()  # new: measured from now, not from beat's start
        assert liveness.beat_schedule_read()[0] < int(time.time() * 1000) - 7_000_000  # start kept

        added.enabled = False
        added.save(update_fields=["enabled"])
        scheduler._held_at = None
        scheduler.tick()
        assert "tests.a_new_sweep_task" not in liveness.beat_schedule_read()[1]  # left the schedule

        liveness.sweep_ran(task="tests.a_new_sweep_task")  # it ran once, long before it is enabled again
        redis().hset(SWEEPS_KEY, "tests.a_new_sweep_task", 1)
        added.enabled = True
        added.save(update_fields=["enabled"])
        scheduler._held_at = None
        scheduler.tick()
        assert _late() == set()  # enabled again: from then, not from its old run
    finally:
        added.delete()
