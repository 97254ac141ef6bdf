"""Recovery of work that fell between Redis and RabbitMQ."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from django.conf import settings

from inventory import redis_store, selectors as inventory_selectors
from inventory.services import Reservation

logger = logging.getLogger(__name__)


@dataclass
class OrphanSweep:
    republished: list[str] = field(default_factory=list)
    settled: list[str] = field(default_factory=list)


def orphans_recover(*, grace_seconds: int | None = None, sku_ids: list[str] | None = None) -> OrphanSweep:
    """Re-publish the confirm of every reservation in flight for too long.

    Its message was lost (web process killed between the Lua call and the
    publish, broker lost an unconfirmed message, or it was dead-lettered while
    a store was down). The confirm is idempotent, so re-publishing one that is
    merely slow costs a no-op. An order already in MySQL is settled instead.
    """
    from orders.models import Order

    from inventory.tasks import publish_confirms

    grace_ms = 1000 * (settings.SECKILL_ORPHAN_GRACE_SECONDS if grace_seconds is None else grace_seconds)
    now_ms = int(time.time() * 1000)
    sweep = OrphanSweep()
    for sku_id in (sku_ids if sku_ids is not None else inventory_selectors.sku_ids_live()):
        stale = [e for e in redis_store.inflight_entries(sku_id=sku_id) if now_ms - e.reserved_ms >= grace_ms]
        if not stale:
            continue
        known = dict(
            Order.objects.filter(order_id__in=[e.order_id for e in stale]).values_list("order_id", "status")
        )
        done = [e.order_id for e in stale if e.order_id in known and known[e.order_id] != Order.Status.FAILED]
        if done:
            redis_store.settle(sku_id=sku_id, confirmed=done, failed=[])
            sweep.settled += done
        lost = [Reservation.from_inflight(sku_id, e) for e in stale if e.order_id not in done]
        publish_confirms(lost)
        sweep.republished += [r.order_id for r in lost]
    if sweep.republished or sweep.settled:
        logger.warning("orphan sweep: republished %s, settled %s", sweep.republished, sweep.settled)
    return sweep
