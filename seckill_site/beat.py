"""celery beat's scheduler: django-celery-beat's DatabaseScheduler, made to
outlive a database that goes away.

Every so often the upstream scheduler reads the whole schedule from MySQL
inside `tick()` without catching database errors (its change check catches
them, the periodic full read does not), and celery beat exits on any error
from `tick()`: a MariaDB restart at that moment stopped beat for good, and
with it the orphan sweep that finishes reservations whose message was never
sent (the class of bug of celery/django-celery-beat#158 and celery/celery#3135).
Here a database error in a tick keeps the schedule beat already has, drops
the dead connection and tries again a moment later.
"""
from __future__ import annotations

import logging

from django.db import DatabaseError, InterfaceError, close_old_connections, connection
from django_celery_beat.schedulers import DatabaseScheduler as UpstreamScheduler

logger = logging.getLogger(__name__)

RETRY_S = 1.0


class DatabaseScheduler(UpstreamScheduler):
    def tick(self, *args, **kwargs):
        try:
            return super().tick(*args, **kwargs)
        except (DatabaseError, InterfaceError) as exc:
            logger.warning("beat: the database is unavailable (%r); keeping the schedule, again in %.0f s",
                           exc, RETRY_S)
            try:
                connection.close()
            except Exception:  # already broken: Django opens a new one next time
                pass
            close_old_connections()
            return RETRY_S
