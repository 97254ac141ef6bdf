"""celery beat's scheduler: django-celery-beat's DatabaseScheduler, made to
outlive a database that goes away.

Every so often the upstream scheduler reads the whole schedule from MySQL
inside `tick()` without catching database errors (its change check catches
them, the periodic full read does not), and celery beat exits on any error
from `tick()`: a MariaDB restart at that moment stops beat for good, and
with it the orphan sweep that finishes reservations whose message was never
sent (the class of bug of celery/django-celery-beat#158 and celery/celery#3135).
Here a database error in a tick keeps the schedule beat already has, drops
the dead connection and tries again a moment later.

It also tells the health check which sweeps it holds, in the records of
inventory's liveness module (the project package sits above every app and
calls it directly): when it started, and since when each task is in its
schedule, written at the first tick and every HELD_REFRESH_S after (so a task
enabled meanwhile, and the records after a Redis loss, follow within that
time). A sweep is then measured from the moment it could first have run, not
from nothing: right after a start, no sweep is late before its intervals pass.
"""
from __future__ import annotations

import contextlib
import logging
import time

from django.db import DatabaseError, InterfaceError, close_old_connections, connection
from django_celery_beat.schedulers import DatabaseScheduler as UpstreamScheduler
from redis.exceptions import RedisError

from inventory.redis.liveness import beat_schedule_held

logger = logging.getLogger(__name__)

RETRY_S = 1.0
HELD_REFRESH_S = 30.0


class DatabaseScheduler(UpstreamScheduler):
    _held_at: float | None = None  # monotonic time of the last attempt to write the held records
    _start_recorded = False

    def tick(self, *args, **kwargs):
        delay = self._tick(*args, **kwargs)
        self._declare_held()
        return delay

    def _declare_held(self) -> None:
        """Write which tasks this beat holds; never raises (a tick must go on)."""
        now = time.monotonic()
        if self._held_at is not None and now - self._held_at < HELD_REFRESH_S:
            return
        self._held_at = now
        try:
            tasks = sorted({entry.task for entry in self.schedule.values()})
            beat_schedule_held(tasks=tasks, started=not self._start_recorded)
            self._start_recorded = True
        except (RedisError, DatabaseError, InterfaceError) as exc:
            logger.warning("beat: the schedule it holds is not recorded (%r); again in %.0f s", exc, HELD_REFRESH_S)

    def _tick(self, *args, **kwargs):
        try:
            return super().tick(*args, **kwargs)
        except (DatabaseError, InterfaceError) as exc:
            logger.warning("beat: the database is unavailable (%r); keeping the schedule, again in %.0f s",
                           exc, RETRY_S)
            with contextlib.suppress(Exception):  # already broken: Django opens a new one next time
                connection.close()
            close_old_connections()
            return RETRY_S
