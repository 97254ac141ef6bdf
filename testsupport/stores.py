"""Assertions about the stores: MySQL's buckets and Redis agree, nothing is in flight,
orders are confirmed, moves and gives have landed, what a RabbitMQ queue holds."""
from __future__ import annotations

import subprocess

from testsupport import wait_until


def settled(sku_id: str, *, timeout: float = 30.0) -> None:
    """Wait until Redis has nothing in flight for the SKU."""
    from inventory.redis import gate, live as redis_live

    wait_until(lambda: (redis_live.live_stock(sku_id=sku_id) or redis_live.LiveStock(0, 0, 0, 0, 0)).inflight == 0
               and not gate.inflight_entries(sku_id=sku_id),
               timeout=timeout, what=f"nothing in flight for {sku_id}")


def assert_balanced(sku_id: str):
    """MySQL buckets add up, and Redis available equals MySQL available."""
    from inventory.redis import live as redis_live
    from inventory.models import Sku

    sku = Sku.objects.get(pk=sku_id)
    assert sku.total_stock == sku.available_stock + sku.frozen_stock + sku.locked_stock + sku.sold_stock
    assert min(sku.available_stock, sku.frozen_stock, sku.locked_stock, sku.sold_stock) >= 0
    live = redis_live.live_stock(sku_id=sku_id)
    assert live is not None, "snapshot missing in Redis"
    assert live.inflight == 0
    assert live.available == sku.available_stock, (live, sku.available_stock)
    return sku


def decr_log_by_order(sku_id: str) -> dict[str, str]:
    from inventory.models import InventoryLog

    rows = InventoryLog.objects.filter(sku_id=sku_id, operation=InventoryLog.Operation.DECR)
    out: dict[str, str] = {}
    for order_id, status in rows.values_list("order_id", "status"):
        assert order_id not in out, f"two DECR rows for {order_id}"
        out[order_id] = status
    return out


def confirmed(order_id: str) -> None:
    from orders.models import Order

    wait_until(lambda: Order.objects.filter(pk=order_id, status=Order.Status.PENDING_PAYMENT).exists(),
               what=f"order {order_id} confirmed")


def every_unit_taken_is_a_202(sku_id: str, accepted: set[str]) -> None:
    """Every accepted order confirmed, nothing left in flight for a sweep to
    find, and the gate's takes of the SKU exactly those orders: no request
    answered otherwise took a unit."""
    for order_id in accepted:
        confirmed(order_id)
    settled(sku_id)
    assert set(decr_log_by_order(sku_id)) == accepted
    assert assert_balanced(sku_id).locked_stock == len(accepted)


def moves_applied(sku_id: str) -> None:
    """Until the mover applied every pay, cancel and expiry of the SKU to its row."""
    from orders.selectors import moves_pending

    wait_until(lambda: moves_pending(sku_ids=[sku_id]) == 0, what="order moves applied")


def gives_applied(sku_id: str) -> None:
    """Until every move of the SKU reached its row and every give reached Redis
    (log rows success, outbox sent)."""
    from inventory.models import InventoryLog, OutboxMessage

    moves_applied(sku_id)
    wait_until(lambda: not InventoryLog.objects.filter(sku_id=sku_id, status="pending")
               .exclude(operation="DECR").exists()
               and not OutboxMessage.objects.filter(sku_id=sku_id, sent_at__isnull=True).exists(),
               what="gives applied")


def rabbitmq_queue(name: str) -> dict:
    """A queue's figures as RabbitMQ reports them (messages, unacknowledged, consumers)."""
    import json

    out = subprocess.run(["rabbitmqctl", "list_queues", "-q", "--formatter", "json", "name", "messages",
                          "messages_unacknowledged", "consumers", "arguments"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    for q in json.loads(out):
        if q["name"] == name:
            return q
    return {}
