"""The health figures of GET /api/v1/health (and `manage.py health`): each
part probed, none raising, measured at most once a second per process."""
from __future__ import annotations

import time

from django.conf import settings
from django.db import connection
from django_celery_beat.models import PeriodicTask

from inventory.messages import broker_probe
from inventory.redis import liveness

# The parts every answer names, in this order: the API's declaration, the
# command's --part and the probes all take them from here.
HEALTH_PARTS = ("mysql", "redis", "broker", "worker", "beat")
HEALTH_CACHE_SECONDS = 1.0
WORKER_SEEN_WITHIN_SECONDS = 5.0
_health_cache: dict[str, tuple[float, dict]] = {}


def _check(fn) -> str:
    try:
        out = fn()
        return "ok" if out in (None, True) else str(out)
    except Exception as exc:  # a health probe reports, it does not raise
        return f"error: {exc.__class__.__name__}"


def _mysql() -> None:
    with connection.cursor() as cur:
        cur.execute("SELECT 1")


def _broker() -> None:
    broker_probe.confirm_queue_depth()


def _worker() -> str | None:
    """Every partition of the confirm stream has a consumer alive (a partition
    without one holds its SKUs' confirms and fences while the others drain)."""
    seen = liveness.partitions_consumed(within_s=WORKER_SEEN_WITHIN_SECONDS)
    n = settings.SECKILL_CONFIRM_PARTITIONS
    missing = [p for p in range(n) if not seen.get(p)]
    if not missing:
        return None
    if len(missing) == n:
        return f"error: no confirm consumer seen within {WORKER_SEEN_WITHIN_SECONDS:.0f} s"
    return (f"error: no confirm consumer of partition {', '.join(map(str, missing))} of {n} seen within "
            f"{WORKER_SEEN_WITHIN_SECONDS:.0f} s")


BEAT_SLACK_MS = 2000


def sweep_late(*, now_ms: float, every_ms: float, ran: int | None, held: int | None, started: int | None) -> bool:
    """Is a sweep late? Three of its intervals (and a little slack) have passed
    since the moment it is measured from:

    - its last run, when it ran since beat began holding it in its schedule;
    - otherwise (never ran, or not since it was enabled again) the later of
      the start of the running beat and the moment beat began holding it: it
      cannot have run before either. Measured from nothing, every sweep would
      read late after a fresh start until its first interval had passed.

    With none of these records (beat never started, or Redis lost them and
    beat has not written them again yet) it is late: nothing shows beat alive."""
    if ran is not None and (held is None or ran >= held):
        since = ran
    else:
        since = max((t for t in (held, started) if t is not None), default=None)
    return since is None or now_ms - since > 3 * every_ms + BEAT_SLACK_MS


def _beat() -> str | None:
    """Every enabled periodic sweep ran within three of its intervals (sweep_late)."""
    last = liveness.sweeps_last_run()
    started, held = liveness.beat_schedule_read()
    now = time.time() * 1000
    late = []
    for task in PeriodicTask.objects.filter(enabled=True, interval__isnull=False).select_related("interval"):
        every_ms = task.interval.every * {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400}.get(
            task.interval.period, 1) * 1000
        if sweep_late(now_ms=now, every_ms=every_ms, ran=last.get(task.task), held=held.get(task.task),
                      started=started):
            late.append(task.task.rsplit(".", 1)[-1])
    return f"error: late: {', '.join(sorted(late))}" if late else None


def system_health() -> dict:
    """The figures of GET /api/v1/health, measured at most once a second per
    process: mysql, redis, broker, worker (a confirm consumer alive within the
    last seconds), beat (the sweeps ran within three intervals)."""
    cached = _health_cache.get("last")
    if cached and time.monotonic() - cached[0] < HEALTH_CACHE_SECONDS:
        return cached[1]
    body = {"mysql": _check(_mysql), "redis": _check(liveness.ping), "broker": _check(_broker)}
    body["worker"] = _check(_worker) if body["redis"] == "ok" else "error: redis unavailable"
    body["beat"] = (_check(_beat) if body["redis"] == "ok" and body["mysql"] == "ok"
                    else "error: cannot be read while a store is down")
    _health_cache["last"] = (time.monotonic(), body)
    return body
