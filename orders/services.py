"""Order writes. `order_place` is the purchase path: Redis and RabbitMQ only."""
from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass

from django.conf import settings

from inventory import redis_store, services as inventory_services
from inventory.errors import (
    IdempotencyKeyReused, LimitReached, SaleNotActive, SkuNotFound, SoldOut, Unavailable,
)

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
