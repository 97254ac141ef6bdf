from __future__ import annotations

from celery import shared_task

from inventory import redis_store
from orders.services import life


@shared_task(name="orders.tasks.orders_expire_task", expires=60)
def orders_expire_task() -> int:
    """Beat: expire unpaid orders past their payment window (in batches)."""
    total = 0
    while True:
        n = life.orders_expire(limit=200)
        total += n
        if n < 200:
            redis_store.sweep_ran(task="orders.tasks.orders_expire_task")
            return total
