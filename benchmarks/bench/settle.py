"""Waiting for the stores to catch up with a sale, and the check of every unit
and order of a SKU in both stores once they have."""
from __future__ import annotations

import time


def by_sku(accepted: dict[str, str], sku_ids: list[str]) -> dict[str, set[str]]:
    """The accepted order ids of each SKU (the 202s' bodies name it)."""
    out: dict[str, set[str]] = {s: set() for s in sku_ids}
    for oid, sku_id in accepted.items():
        if sku_id not in out:
            raise SystemExit(f"a 202 for {sku_id!r} (order {oid}), which this sale did not offer")
        out[sku_id].add(oid)
    return out


def wait_locked_all(accepted: dict[str, set[str]], timeout: float = 120) -> float | None:
    """wait_locked for every SKU of a sale at once: when MySQL had taken all
    their accepted units (perf_counter), or None on timeout."""
    from inventory.models import Sku

    if len(accepted) == 1:
        (sku_id, ids), = accepted.items()
        return wait_locked(sku_id, len(ids), timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = Sku.objects.filter(pk__in=list(accepted)).values_list(
            "sku_id", "total_stock", "available_stock", "frozen_stock")
        if all(total - available - frozen >= len(accepted[sku_id]) for sku_id, total, available, frozen in rows):
            return time.perf_counter()
        time.sleep(0.02)
    return None


def wait_locked(sku_id: str, units: int, timeout: float = 120) -> float | None:
    """Until MySQL has taken `units` units of the SKU out of `available` (every
    acceptance confirmed); returns when (perf_counter), or None on timeout."""
    from inventory.models import Sku

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s = Sku.objects.get(pk=sku_id)
        if s.total_stock - s.available_stock - s.frozen_stock >= units:
            return time.perf_counter()
        time.sleep(0.02)
    return None



def settle_life(sku_ids: list[str], timeout: float = 120) -> bool:
    """Expire what is still unpaid (as the sweep does), then wait until every
    bucket move and every give has reached both stores."""
    from datetime import timedelta

    from django.utils import timezone

    from orders.models import Order
    from orders.services import life

    Order.objects.filter(sku_id__in=sku_ids, status="PENDING_PAYMENT").update(
        expires_at=timezone.now() - timedelta(seconds=1))
    while life.orders_expire(limit=500, sku_ids=sku_ids):
        pass
    return wait_quiet(sku_ids, timeout)


def wait_quiet(sku_ids: list[str], timeout: float) -> bool:
    from inventory.models import InventoryLog, OutboxMessage
    from inventory.redis import gate
    from orders.selectors import moves_pending

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (not moves_pending(sku_ids=sku_ids)
                and not InventoryLog.objects.filter(sku_id__in=sku_ids, status="pending")
                .exclude(operation="DECR").exists()
                and not OutboxMessage.objects.filter(sku_id__in=sku_ids, sent_at__isnull=True).exists()
                and not any(gate.inflight_entries(sku_id=s) for s in sku_ids)):
            return True
        time.sleep(0.1)
    return False


def check_sku(sku_id: str, stock: int, accepted, *, gate: bool) -> dict:
    """Every unit and order of the SKU in both stores: the buckets add up and
    match the orders, Redis equals MySQL, no accepted order lost, none extra.
    `accepted`: the order ids of its 202s (a set, or a Phase's order -> SKU dict)."""
    accepted = set(accepted)
    from inventory.models import InventoryLog, Sku
    from inventory.redis import live as redis_live
    from orders.models import Order

    sku = Sku.objects.get(pk=sku_id)
    live = redis_live.live_stock(sku_id=sku_id) if gate else None
    orders = Order.objects.filter(sku_id=sku_id).exclude(status=Order.Status.FAILED)
    ids = set(orders.values_list("order_id", flat=True))
    by = {s: orders.filter(status=s).count() for s in ("PENDING_PAYMENT", "PAID", "CANCELLED", "EXPIRED")}
    decr = InventoryLog.objects.filter(sku_id=sku_id, operation="DECR").exclude(order_id__isnull=True)
    # A reservation whose publish was not confirmed in time is released and
    # answered 503 (nothing taken): its sale log row stays, failed, with no order.
    decr_ids = list(decr.values_list("order_id", "status"))
    released = [oid for oid, _ in decr_ids if oid not in ids]
    released_ok = all(st == "fail" for oid, st in decr_ids if oid not in ids) and not set(released) & accepted
    balanced = sku.total_stock == sku.available_stock + sku.frozen_stock + sku.locked_stock + sku.sold_stock
    given_back = by["CANCELLED"] + by["EXPIRED"]
    sold = len(ids)
    ok = (balanced and accepted == ids and len(decr_ids) - len(released) == len(ids) and released_ok
          and sku.locked_stock == by["PENDING_PAYMENT"]
          and sku.sold_stock == by["PAID"] and sku.available_stock == stock - sold + given_back
          and (live is None or (live.available == sku.available_stock and live.inflight == 0)))
    return {
        "sku": sku_id, "stock": stock, "available": sku.available_stock, "locked": sku.locked_stock,
        "sold": sku.sold_stock, "redis_available": live.available if live else None, "orders": len(ids),
        **{k.lower(): v for k, v in by.items()}, "balanced": balanced,
        "oversold": max(0, by["PENDING_PAYMENT"] + by["PAID"] - stock), "lost": len(accepted - ids),
        "phantom": len(ids - accepted), **({"released": len(released)} if released else {}), "ok": ok,
    }
