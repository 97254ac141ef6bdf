"""Steps of the purchase path played by hand, for tests that stand in for a part of it:
a take in the gate without a publish, a confirm message, the confirm consumer reaching a fence."""
from __future__ import annotations

import uuid


def reserve_direct(sku_id: str, user_id: int, qty: int = 1, key: str | None = None):
    """Take stock in the gate as the purchase path does, without publishing."""
    from inventory.domain import Reservation
    from inventory.redis import gate, keys as redis_keys
    from orders.services.place import order_id_new

    oid = order_id_new(sku_id=sku_id)
    key = key or uuid.uuid4().hex
    r = gate.reserve(sku_id=sku_id, user_id=user_id, quantity=qty, idempotency_key=key, order_id=oid)
    assert r.code is redis_keys.Reserve.OK, r
    return Reservation(oid, sku_id, user_id, qty, key, r.reserved_ms, r.epoch, r.unit_price)


def publish(*reservations) -> None:
    """One confirm message per reservation, as the purchase path sends them."""
    from inventory.messages import publisher

    for r in reservations:
        publisher.publish_confirms([r])


def fence_reached(sku_id: str) -> None:
    """Play the confirm consumer reaching the SKU's standing fence (for tests
    where nothing is left in the broker ahead of it): the snapshot is loaded."""
    from inventory.redis import snapshots as redis_snapshots
    from inventory.services.snapshots import stock_fence_pass

    assert stock_fence_pass(sku_id=sku_id, token=redis_snapshots.fence_token(sku_id=sku_id))


def rebuild_lost(sku_id: str) -> None:
    """Redis lost this SKU: it is fenced, then its fence is reached."""
    from inventory.services.snapshots import Warm, stock_warm

    assert stock_warm(sku_id=sku_id) is Warm.FENCED
    fence_reached(sku_id)
