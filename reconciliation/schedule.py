"""The periodic tasks this project needs, stored by django-celery-beat.

Created after `migrate` when missing; never overwritten, so an interval that
ops changed in the admin stays as they set it.
"""
from __future__ import annotations

from django.conf import settings

PERIODIC_TASKS = (
    # (name, task, every_seconds)
    ("seckill: recover orphan reservations", "reconciliation.tasks.orphans_recover_task",
     "SECKILL_ORPHAN_SWEEP_SECONDS"),
    ("seckill: expire unpaid orders", "orders.tasks.orders_expire_task", "SECKILL_EXPIRY_SWEEP_SECONDS"),
    ("seckill: relay unsent outbox messages", "inventory.tasks.outbox_relay_task", "SECKILL_OUTBOX_SWEEP_SECONDS"),
    ("seckill: reconcile Redis and MySQL", "reconciliation.tasks.reconcile_task", "SECKILL_RECONCILE_SECONDS"),
    ("seckill: collect dead letters", "inventory.tasks.dead_letters_collect_task", "SECKILL_DEAD_LETTER_SWEEP_SECONDS"),
    ("seckill: alert ops (dead letters, drift)", "reconciliation.tasks.alerts_send_task",
     "SECKILL_DEAD_LETTER_SWEEP_SECONDS"),
    ("seckill: delete old rows, drop ended SKUs' Redis keys", "reconciliation.tasks.retention_sweep_task",
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
