"""The periodic tasks this project needs, stored by django-celery-beat.

Created after `migrate` when missing; never overwritten, so an interval that
ops changed in the admin stays as they set it.
"""
from __future__ import annotations

from django.conf import settings

from inventory import tasks as inventory_tasks
from orders import tasks as orders_tasks
from reconciliation import tasks as reconciliation_tasks

PERIODIC_TASKS = (
    # (name, task, every_seconds)
    ("seckill: recover orphan reservations", reconciliation_tasks.ORPHANS_RECOVER_TASK,
     "SECKILL_ORPHAN_SWEEP_SECONDS"),
    ("seckill: expire unpaid orders", orders_tasks.ORDERS_EXPIRE_TASK, "SECKILL_EXPIRY_SWEEP_SECONDS"),
    ("seckill: relay unsent outbox messages", inventory_tasks.OUTBOX_RELAY_TASK, "SECKILL_OUTBOX_SWEEP_SECONDS"),
    # The outbox interval paces this sweep too (docs/configuration.md, "Variables");
    # an existing install gets this row at its next `migrate`.
    ("seckill: cancel unfinished freezes", inventory_tasks.FREEZES_RESOLVE_TASK, "SECKILL_OUTBOX_SWEEP_SECONDS"),
    ("seckill: reconcile Redis and MySQL", reconciliation_tasks.RECONCILE_TASK, "SECKILL_RECONCILE_SECONDS"),
    ("seckill: collect dead letters", inventory_tasks.DEAD_LETTERS_COLLECT_TASK, "SECKILL_DEAD_LETTER_SWEEP_SECONDS"),
    ("seckill: alert ops (dead letters, drift)", reconciliation_tasks.ALERTS_SEND_TASK,
     "SECKILL_DEAD_LETTER_SWEEP_SECONDS"),
    ("seckill: delete old rows, drop ended SKUs' Redis keys", reconciliation_tasks.RETENTION_SWEEP_TASK,
     "SECKILL_RETENTION_SWEEP_SECONDS"),
)


def ensure_periodic_tasks(**_kwargs) -> None:
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    for name, task, setting in PERIODIC_TASKS:
        if PeriodicTask.objects.filter(name=name).exists():
            continue
        every = int(getattr(settings, setting))
        interval, _ = IntervalSchedule.objects.get_or_create(every=every, period=IntervalSchedule.SECONDS)
        PeriodicTask.objects.create(name=name, task=task, interval=interval, enabled=True)
