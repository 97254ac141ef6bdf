from __future__ import annotations

from celery import shared_task

from inventory.redis import liveness
from orders.services import life


ORDERS_EXPIRE_TASK = "orders.tasks.orders_expire_task"  # beat's name for it (reconciliation.schedule)


@shared_task(name=ORDERS_EXPIRE_TASK, expires=60)
def orders_expire_task() -> int:
    """Beat: expire unpaid orders past their payment window (in batches)."""
    total = 0
    while True:
        n = life.orders_expire(limit=200)
        total += n
        if n < 200:
            liveness.sweep_ran(task=ORDERS_EXPIRE_TASK)
            return total
