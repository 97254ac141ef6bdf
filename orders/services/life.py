"""The order life after the confirm: pay, cancel, expire.

Each is a conditional transition on the order row, taken under the SKU row lock
and then the order row lock (the one order every path uses), so when they race
exactly one wins and the others see its result.
"""
from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from core.retry import with_mysql_retry
from core.errors import NotCancellable, NotPayable, OrderNotFound, PaymentIdReused
from inventory.models import InventoryLog, Sku
from inventory.services.gives import stock_give_record
from inventory.services.locks import skus_lock
from orders.models import Order

def _locked_order(*, user_id: int | None, order_id: str) -> Order | None:
    """The order, locked (SKU row first, then the order row) if it may still
    move; an order already final is returned as read, locking nothing, so a
    refusal or a repeat costs no hot-row lock."""
    head = Order.objects.filter(pk=order_id)
    if user_id is not None:
        head = head.filter(user_id=user_id)
    seen = head.first()
    if seen is None or seen.status != Order.Status.PENDING_PAYMENT:
        return seen
    skus_lock(sku_ids=[seen.sku_id])
    return Order.objects.select_for_update().get(pk=order_id)


def _not_in_mysql(*, user_id: int, token: str | None, order_id: str, error: type[Exception]) -> Exception:
    """An order still in flight exists but cannot move yet; anything else is 404."""
    from orders import selectors

    found = token is not None and selectors.order_get(user_id=user_id, token=token, order_id=order_id)
    return error(status="PROCESSING") if found else OrderNotFound()


def _lock_for_transition(*, user_id: int, token: str | None, order_id: str, target: str,
                         error: type[Exception]) -> tuple[Order, bool]:
    """Lock the caller's order for a move out of PENDING_PAYMENT to `target`.

    Returns (order, already_there): an order already in `target` is answered
    as it is (the call is harmless to repeat); any other state is refused.
    """
    order = _locked_order(user_id=user_id, order_id=order_id)
    if order is None:
        raise _not_in_mysql(user_id=user_id, token=token, order_id=order_id, error=error)
    if order.status == target:
        return order, True
    if order.status != Order.Status.PENDING_PAYMENT:
        raise error(status=order.status)
    return order, False


def order_pay(*, user_id: int, order_id: str, payment_id: str | None = None, token: str | None = None) -> Order:
    """PENDING_PAYMENT and not expired -> PAID: locked -> sold, sale log success.

    Paying a paid order again answers the order (harmless); with a payment id,
    the provider's retried callback is recognised by it.
    """
    if payment_id and Order.objects.filter(payment_id=payment_id).exclude(pk=order_id).exists():
        raise PaymentIdReused(payment_id=payment_id)

    def pay() -> Order:
        now = timezone.now()
        with transaction.atomic(durable=True):
            order, done = _lock_for_transition(user_id=user_id, token=token, order_id=order_id, target=Order.Status.PAID,
                                               error=NotPayable)
            if done:
                return order
            if order.expires_at and order.expires_at <= now:
                raise NotPayable(status=order.status)
            moved = Sku.objects.filter(pk=order.sku_id, locked_stock__gte=order.quantity).update(
                locked_stock=F("locked_stock") - order.quantity, sold_stock=F("sold_stock") + order.quantity,
                updated_at=now)
            if moved != 1:
                raise RuntimeError(f"locked stock of {order.sku_id} below order {order_id}")
            order.status, order.paid_at, order.payment_id = Order.Status.PAID, now, payment_id
            try:
                with transaction.atomic():
                    order.save(update_fields=["status", "paid_at", "payment_id", "updated_at"])
            except IntegrityError:  # the same payment id, paying another order at the same moment
                raise PaymentIdReused(payment_id=payment_id) from None
            InventoryLog.objects.filter(order_id=order_id, operation=InventoryLog.Operation.DECR).update(
                status=InventoryLog.Status.SUCCESS, updated_at=now)
            return order

    return with_mysql_retry(pay)


def order_cancel(*, user_id: int, order_id: str, token: str | None = None) -> Order:
    """PENDING_PAYMENT -> CANCELLED by its owner; the units go back (MySQL now,
    Redis through the outbox). Cancelling a cancelled order answers it again."""
    def cancel() -> Order:
        with transaction.atomic(durable=True):
            order, done = _lock_for_transition(user_id=user_id, token=token, order_id=order_id, target=Order.Status.CANCELLED,
                                               error=NotCancellable)
            if not done:
                _give_back([order], final=Order.Status.CANCELLED, reason="cancelled by buyer")
            return order

    return with_mysql_retry(cancel)


def orders_expire(*, limit: int = 200, sku_ids: list[str] | None = None) -> int:
    """Expire unpaid orders past their deadline, in batches, one SKU at a time.

    Rows another sweeper (or a pay/cancel) holds are skipped, not waited for.
    """
    now = timezone.now()
    pending = Order.objects.filter(status=Order.Status.PENDING_PAYMENT, expires_at__lte=now)
    if sku_ids is not None:
        pending = pending.filter(sku_id__in=sku_ids)
    due = list(pending.order_by("expires_at").values_list("order_id", "sku_id")[:limit])
    by_sku: dict[str, list[str]] = {}
    for order_id, sku_id in due:
        by_sku.setdefault(sku_id, []).append(order_id)
    expired = 0
    for sku_id, ids in sorted(by_sku.items()):
        def expire(sku_id=sku_id, ids=ids) -> int:
            with transaction.atomic(durable=True):
                skus_lock(sku_ids=[sku_id])
                orders = list(
                    Order.objects.select_for_update(skip_locked=True)
                    .filter(pk__in=ids, status=Order.Status.PENDING_PAYMENT, expires_at__lte=timezone.now())
                    .order_by("pk")
                )
                if orders:
                    _give_back(orders, final=Order.Status.EXPIRED, reason="payment window passed")
                return len(orders)

        expired += with_mysql_retry(expire)
    return expired


def _give_back(orders: list[Order], *, final: str, reason: str) -> None:
    """Inside the transaction, with the SKU row and the order rows locked."""
    now = timezone.now()
    sku_id = orders[0].sku_id
    units = sum(o.quantity for o in orders)
    moved = Sku.objects.filter(pk=sku_id, locked_stock__gte=units).update(
        locked_stock=F("locked_stock") - units, available_stock=F("available_stock") + units, updated_at=now)
    if moved != 1:
        raise RuntimeError(f"locked stock of {sku_id} below the orders being released")
    for o in orders:
        o.status, o.closed_at = final, now
    Order.objects.bulk_update(orders, ["status", "closed_at", "updated_at"])
    InventoryLog.objects.filter(order_id__in=[o.order_id for o in orders],
                                operation=InventoryLog.Operation.DECR).update(
        status=InventoryLog.Status.FAIL, reason=reason, updated_at=now)
    for o in orders:
        stock_give_record(
            sku_id=sku_id, quantity=o.quantity, op_id=f"{o.order_id}:release", user_id=o.user_id,
            order_id=o.order_id, reason=reason, actor=f"user:{o.user_id}" if final == "CANCELLED" else "expiry")
