"""The beat rows: each names a task the worker knows, and an install from
before a sweep existed gets its row at the next migrate."""
from __future__ import annotations

from django_celery_beat.models import PeriodicTask

from inventory.tasks import FREEZES_RESOLVE_TASK
from reconciliation.schedule import PERIODIC_TASKS, ensure_periodic_tasks
from seckill_site.celery import app


def test_every_beat_row_names_a_registered_task(live_db):
    app.loader.import_default_modules()
    assert {task for _name, task, _every in PERIODIC_TASKS} <= set(app.tasks)
    stored = set(PeriodicTask.objects.filter(name__startswith="seckill: ").values_list("task", flat=True))
    assert stored == {task for _name, task, _every in PERIODIC_TASKS}


def test_an_older_install_gets_the_freezes_sweep_at_its_next_migrate(live_db):
    PeriodicTask.objects.filter(task=FREEZES_RESOLVE_TASK).delete()  # as before the sweep had its own row
    ensure_periodic_tasks()
    row = PeriodicTask.objects.get(task=FREEZES_RESOLVE_TASK)
    assert row.enabled and row.interval.every > 0
