from __future__ import annotations

from inventory.sweeps import sweep_task
from orders.services import life

ORDERS_EXPIRE_TASK = "orders.tasks.orders_expire_task"  # beat's name for it (reconciliation.schedule)


@sweep_task(ORDERS_EXPIRE_TASK, expires=60)
def orders_expire_task() -> int:
    """Beat: expire unpaid orders past their payment window (in batches)."""
    total = 0
    while True:
        n = life.orders_expire(limit=200)
        total += n
        if n < 200:
            return total
