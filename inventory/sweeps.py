"""Beat's sweeps as Celery tasks, declared in one way by every app's tasks.py.

A sweep task is its service call: `sweep_task` registers the function as the
Celery task beat sends by name and, once the call returns, records that the
sweep ran (inventory.redis.liveness.sweep_ran), which the health check reads to
find a sweep that stopped running (inventory.health.sweep_late)."""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from celery import shared_task

from inventory.redis import liveness

T = TypeVar("T")


def sweep_task(name: str, *, record_raised: bool = False, **options: Any) -> Callable[[Callable[[], T]], Any]:
    """`@sweep_task(NAME, expires=60)` over a function of no arguments: the
    Celery task `name` (beat's rows and the migrations store that name, so it
    is given, never derived) with Celery's `options`. A sweep that raises is
    not recorded, so one that keeps failing shows late in health; with
    `record_raised` it is recorded all the same."""
    def declare(sweep: Callable[[], T]) -> Any:
        @functools.wraps(sweep)
        def run() -> T:
            done = False
            try:
                result = sweep()
                done = True
                return result
            finally:
                if done or record_raised:
                    liveness.sweep_ran(task=name)

        return shared_task(name=name, **options)(run)

    return declare
