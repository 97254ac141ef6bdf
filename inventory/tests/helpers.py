"""Assertions about both stores, shared by the tests."""
from __future__ import annotations

from conftest import wait_until
from inventory import redis_store
from inventory.models import InventoryLog, Sku


def settled(sku_id: str, *, timeout: float = 30.0) -> None:
    """Wait until Redis has nothing in flight for the SKU."""
    wait_until(lambda: (redis_store.live_stock(sku_id=sku_id) or redis_store.LiveStock(0, 0, 0, 0, 0)).inflight == 0
               and not redis_store.inflight_entries(sku_id=sku_id),
               timeout=timeout, what=f"nothing in flight for {sku_id}")


def assert_balanced(sku_id: str) -> Sku:
    """MySQL buckets add up, and Redis available equals MySQL available."""
    sku = Sku.objects.get(pk=sku_id)
    assert sku.total_stock == sku.available_stock + sku.frozen_stock + sku.locked_stock + sku.sold_stock
    assert min(sku.available_stock, sku.frozen_stock, sku.locked_stock, sku.sold_stock) >= 0
    live = redis_store.live_stock(sku_id=sku_id)
    assert live is not None, "snapshot missing in Redis"
    assert live.inflight == 0
    assert live.available == sku.available_stock, (live, sku.available_stock)
    return sku


def decr_log_by_order(sku_id: str) -> dict[str, str]:
    rows = InventoryLog.objects.filter(sku_id=sku_id, operation=InventoryLog.Operation.DECR)
    out: dict[str, str] = {}
    for order_id, status in rows.values_list("order_id", "status"):
        assert order_id not in out, f"two DECR rows for {order_id}"
        out[order_id] = status
    return out
