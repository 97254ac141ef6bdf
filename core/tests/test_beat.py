"""celery beat outlives a database that goes away (seckill_site.beat)."""
from __future__ import annotations

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
        scheduler._last_full_sync = datetime.now() - timedelta(hours=1)  # upstream keeps naive local time

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
