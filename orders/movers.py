"""The bucket mover: a Celery worker bootstep that applies the order moves pay,
cancel and expiry decided (orders.services.life.order_moves_apply), in batches
per SKU, so no request ever waits for a SKU row.

It owns one thread. Every SECKILL_MOVER_INTERVAL_MS it asks MySQL which SKUs
have moves waiting (an index scan of the few orders whose units are still
`locked` although their status is final) and applies each SKU's batch; a SKU
another mover holds is skipped (that mover does the work). Started by `celery
-A seckill_site worker` (seckill_site/celery.py adds the step);
SECKILL_MOVER=0 leaves it out.
"""
from __future__ import annotations

import logging
import threading

from celery import bootsteps
from django.conf import settings
from django.db import close_old_connections

from core.retry import is_transient
from orders import selectors
from orders.services.life import order_moves_apply

logger = logging.getLogger(__name__)
BATCH = 2000


def moves_apply_pending(*, limit_skus: int = 100) -> int:
    """One pass: apply the waiting moves of every SKU that has some. Returns
    how many orders moved."""
    moved = 0
    for sku_id in selectors.skus_with_moves(limit=limit_skus):
        while True:
            done = order_moves_apply(sku_id=sku_id, limit=BATCH)
            moved += done.sold + done.given_back
            if done.busy or done.sold + done.given_back < BATCH:
                break
    return moved


class BucketMover(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="bucket-mover", daemon=True)
        self.stopping = threading.Event()

    def run(self) -> None:
        interval = settings.SECKILL_MOVER_INTERVAL_MS / 1000
        while not self.stopping.wait(interval):
            try:
                moves_apply_pending()
            except Exception as exc:  # a store away: the next pass tries again
                logger.warning("bucket mover: %r", exc, exc_info=not is_transient(exc))
                close_old_connections()
                self.stopping.wait(1.0)

    def stop(self, timeout: float = 10.0) -> None:
        self.stopping.set()
        self.join(timeout)


class BucketMoverStep(bootsteps.StartStopStep):
    label = "bucket mover"

    def __init__(self, parent, **kwargs) -> None:
        super().__init__(parent, **kwargs)
        self.mover: BucketMover | None = None

    def include_if(self, parent) -> bool:
        return bool(settings.SECKILL_MOVER)

    def start(self, parent) -> None:
        self.mover = BucketMover()
        self.mover.start()

    def stop(self, parent) -> None:
        if self.mover is not None:
            self.mover.stop()

    def shutdown(self, parent) -> None:
        self.stop(parent)
