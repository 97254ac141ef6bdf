"""Order writes. `order_place` is the purchase path: Redis and RabbitMQ only."""
from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from inventory import redis_store, services as inventory_services
from inventory.errors import (
    IdempotencyKeyReused, LimitReached, NotCancellable, NotPayable, OrderNotFound, SaleNotActive, SkuNotFound,
    SoldOut, Unavailable,
)
from inventory.models import InventoryLog, Sku
from orders.models import Order

logger = logging.getLogger(__name__)

# sku_id -> monotonic time until which this process answers "sold out" without
# asking Redis. Short, so stock given back is on sale again within a moment.
_sold_out_until: dict[str, float] = {}


@dataclass(frozen=True)
class PlacedOrder:
    order_id: str
    sku_id: str
    quantity: int
    created: bool  # False: the Idempotency-Key had already made this order
    reserved_ms: int


def order_place(
    *, user_id: int, token: str, sku_id: str, quantity: int, idempotency_key: str,
    idempotency_pointer: str | None = None,
) -> PlacedOrder:
    """Take stock in Redis, then publish the confirm; never touches MySQL.

    Redis first: a crash after the take can only under-sell until the orphan
    sweep re-publishes the reservation, never oversell. `idempotency_pointer`
    is the body this key was first used with ("sku|qty"), fetched with the
    token in one round trip; the gate itself holds the authoritative record.
    """
    if idempotency_pointer:
        first_sku, _, first_qty = idempotency_pointer.rpartition("|")
        if first_sku != sku_id or first_qty != str(quantity):
            raise IdempotencyKeyReused()
    elif _sold_out_until.get(sku_id, 0.0) > time.monotonic():
        # A key never used before cannot be a retry: "sold out" is its answer.
        raise SoldOut(sku_id=sku_id)

    order_id = uuid.uuid4().hex
    remember = None if idempotency_pointer else (token, f"{sku_id}|{quantity}")
    result = _reserve_warming(sku_id=sku_id, user_id=user_id, quantity=quantity,
                              idempotency_key=idempotency_key, order_id=order_id, remember=remember)
    code = result.code
    if code == redis_store.OK:
        reservation = inventory_services.Reservation(
            order_id=order_id, sku_id=sku_id, user_id=user_id, quantity=quantity,
            idempotency_key=idempotency_key, reserved_ms=int(time.time() * 1000),
        )
        _publish_or_release(reservation, token=token, forget=remember is not None)
        return PlacedOrder(order_id, sku_id, quantity, created=True, reserved_ms=reservation.reserved_ms)
    if code == redis_store.DUPLICATE:
        return PlacedOrder(result.order_id, sku_id, quantity, created=False, reserved_ms=0)

    # Refused: the key claims nothing, so the client may fix the body and retry.
    if remember is not None:
        _forget(token, idempotency_key)
    if code == redis_store.KEY_REUSED:
        raise IdempotencyKeyReused(order_id=result.order_id)
    if code == redis_store.SOLD_OUT:
        if result.value <= 0:
            _sold_out_until[sku_id] = time.monotonic() + settings.SECKILL_SOLD_OUT_MEMO_SECONDS
        raise SoldOut(sku_id=sku_id)
    if code == redis_store.LIMIT_REACHED:
        raise LimitReached(held=result.value, limit=result.limit)
    if code == redis_store.NOT_ACTIVE:
        raise SaleNotActive(sku_id=sku_id)
    if code == redis_store.UNKNOWN_SKU:
        raise SkuNotFound(sku_id=sku_id)
    raise Unavailable()  # NOT_WARMED right after a warm: Redis is losing data


def _reserve_warming(**kw) -> redis_store.ReserveResult:
    try:
        result = redis_store.reserve(**kw)
        if result.code == redis_store.NOT_WARMED:
            # Redis lost (or never had) this SKU: load it from MySQL, once.
            if not inventory_services.stock_warm(sku_id=kw["sku_id"]):
                if kw.get("remember"):
                    _forget(kw["remember"][0], kw["idempotency_key"])
                raise SkuNotFound(sku_id=kw["sku_id"])
            result = redis_store.reserve(**kw)
        return result
    except redis_store.RedisError as exc:
        # The script may have run before the connection broke: undo by order id
        # (idempotent) so that a 503 keeps its promise that nothing was taken.
        _release_quietly(kw["sku_id"], kw["order_id"])
        if kw.get("remember"):
            _forget(kw["remember"][0], kw["idempotency_key"])
        logger.warning("reserve failed: %r", exc)
        raise Unavailable() from exc


def _publish_or_release(reservation: inventory_services.Reservation, *, token: str, forget: bool) -> None:
    from inventory.tasks import publish_confirm

    try:
        publish_confirm(reservation)
    except Exception as exc:  # any broker failure: undo the take, answer 503
        logger.warning("publish failed for %s: %r", reservation.order_id, exc)
        outcome = _release_quietly(reservation.sku_id, reservation.order_id)
        if outcome == redis_store.RELEASE_CLAIMED:
            # A confirm consumer already holds it (batched with another
            # message): the order goes on, so the client gets its 202.
            return
        if forget:
            _forget(token, reservation.idempotency_key)
        raise Unavailable() from exc


def _release_quietly(sku_id: str, order_id: str) -> int | None:
    for attempt in range(3):
        try:
            return redis_store.release(sku_id=sku_id, order_id=order_id)
        except redis_store.RedisError:
            time.sleep(0.05 * (attempt + 1))
    logger.error("could not release reservation %s of %s; the orphan sweep will confirm it", order_id, sku_id)
    return None


def _forget(token: str, idempotency_key: str) -> None:
    try:
        redis_store.token_forget_key(token=token, idempotency_key=idempotency_key)
    except redis_store.RedisError:
        pass  # a stale mark only sends that key's retries through the gate


# --- The order life after the confirm: pay, cancel, expire ---------------------
# Each is a conditional transition on the order row, taken under the SKU row lock
# and then the order row lock (the one order every path uses), so when they race
# exactly one wins and the others see its result.

def _locked_order(*, user_id: int | None, order_id: str) -> Order | None:
    head = Order.objects.filter(pk=order_id)
    if user_id is not None:
        head = head.filter(user_id=user_id)
    sku_id = head.values_list("sku_id", flat=True).first()
    if sku_id is None:
        return None
    inventory_services.skus_lock(sku_ids=[sku_id])
    return Order.objects.select_for_update().get(pk=order_id)


def _not_in_mysql(*, user_id: int, order_id: str, error: type[Exception]) -> Exception:
    """An order still in flight exists but cannot move yet; anything else is 404."""
    from orders import selectors

    return error() if selectors.order_get(user_id=user_id, order_id=order_id) else OrderNotFound()


def _lock_for_transition(*, user_id: int, order_id: str, target: str,
                         error: type[Exception]) -> tuple[Order, bool]:
    """Lock the caller's order for a move out of PENDING_PAYMENT to `target`.

    Returns (order, already_there): an order already in `target` is answered
    as it is (the call is harmless to repeat); any other state is refused.
    """
    order = _locked_order(user_id=user_id, order_id=order_id)
    if order is None:
        raise _not_in_mysql(user_id=user_id, order_id=order_id, error=error)
    if order.status == target:
        return order, True
    if order.status != Order.Status.PENDING_PAYMENT:
        raise error(status=order.status)
    return order, False


def order_pay(*, user_id: int, order_id: str, payment_id: str | None = None) -> Order:
    """PENDING_PAYMENT and not expired -> PAID: locked -> sold, sale log success.

    Paying a paid order again answers the order (harmless); with a payment id,
    the provider's retried callback is recognised by it.
    """
    def pay() -> Order:
        now = timezone.now()
        with transaction.atomic(durable=True):
            order, done = _lock_for_transition(user_id=user_id, order_id=order_id, target=Order.Status.PAID,
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
            order.save(update_fields=["status", "paid_at", "payment_id", "updated_at"])
            InventoryLog.objects.filter(order_id=order_id, operation=InventoryLog.Operation.DECR).update(
                status=InventoryLog.Status.SUCCESS, updated_at=now)
            return order

    return inventory_services.with_mysql_retry(pay)


def order_cancel(*, user_id: int, order_id: str) -> Order:
    """PENDING_PAYMENT -> CANCELLED by its owner; the units go back (MySQL now,
    Redis through the outbox). Cancelling a cancelled order answers it again."""
    def cancel() -> Order:
        with transaction.atomic(durable=True):
            order, done = _lock_for_transition(user_id=user_id, order_id=order_id, target=Order.Status.CANCELLED,
                                               error=NotCancellable)
            if not done:
                _give_back([order], final=Order.Status.CANCELLED, reason="cancelled by buyer")
            return order

    return inventory_services.with_mysql_retry(cancel)


def orders_expire(*, limit: int = 200) -> int:
    """Expire unpaid orders past their deadline, in batches, one SKU at a time.

    Rows another sweeper (or a pay/cancel) holds are skipped, not waited for.
    """
    now = timezone.now()
    due = list(
        Order.objects.filter(status=Order.Status.PENDING_PAYMENT, expires_at__lte=now)
        .order_by("expires_at").values_list("order_id", "sku_id")[:limit]
    )
    by_sku: dict[str, list[str]] = {}
    for order_id, sku_id in due:
        by_sku.setdefault(sku_id, []).append(order_id)
    expired = 0
    for sku_id, ids in sorted(by_sku.items()):
        def expire(sku_id=sku_id, ids=ids) -> int:
            with transaction.atomic(durable=True):
                inventory_services.skus_lock(sku_ids=[sku_id])
                orders = list(
                    Order.objects.select_for_update(skip_locked=True)
                    .filter(pk__in=ids, status=Order.Status.PENDING_PAYMENT, expires_at__lte=timezone.now())
                    .order_by("pk")
                )
                if orders:
                    _give_back(orders, final=Order.Status.EXPIRED, reason="payment window passed")
                return len(orders)

        expired += inventory_services.with_mysql_retry(expire)
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
        inventory_services.stock_give_record(
            sku_id=sku_id, quantity=o.quantity, op_id=f"{o.order_id}:release", user_id=o.user_id,
            order_id=o.order_id, reason=reason, actor=f"user:{o.user_id}" if final == "CANCELLED" else "expiry")
