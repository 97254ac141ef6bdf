"""The purchase path: Redis and RabbitMQ only, no MySQL unless the publish fails."""
from __future__ import annotations

import contextlib
import logging
import time
import uuid
from dataclasses import dataclass, replace
from typing import NoReturn

from django.conf import settings

from accounts import token_cache
from accounts.token_cache import KeyClaim
from core import admission
from core.errors import (
    IdempotencyKeyReused,
    LimitReached,
    SaleNotActive,
    SkuNotFound,
    SoldOut,
    Unavailable,
)
from core.redis.calls import run_together
from core.redis.errors import NotSent, RedisError, ShardDown
from inventory.domain import Reservation, order_tag
from inventory.messages import group_publisher
from inventory.models import ReservationDecision
from inventory.redis import gate
from inventory.redis.gate import ReserveResult
from inventory.redis.keys import Reserve, UndoOutcome
from inventory.services.decisions import reservation_undo_record
from inventory.services.snapshots import Warm, stock_warm

logger = logging.getLogger(__name__)

# sku_id -> monotonic time until which this process answers "sold out" without
# asking Redis. Short, so stock given back is on sale again within a moment.
_sold_out_until: dict[str, float] = {}
# The memo answers a key it has not seen "sold out" without asking the gate,
# trusting the token's claims to hold every key used before. A Redis loss
# takes those claims with it, so a SKU rebuilt since (a later epoch) is always
# asked: its snapshot's idempotency records answer a retry with its order.
MEMO_EPOCH = 1


@dataclass(frozen=True)
class PlacedOrder:
    order_id: str
    sku_id: str
    quantity: int
    created: bool  # False: the Idempotency-Key had already made this order
    reserved_ms: int


@dataclass(frozen=True)
class _Click:
    token: str
    user_id: int
    sku_id: str
    quantity: int
    key: str
    started: float  # time.monotonic() when the request reached the service


@dataclass(frozen=True)
class _Retired:
    """The order id this key named was undone (its request answered 503): the
    key is free again, under a new order id."""

    order_id: str


@dataclass(frozen=True)
class _Deciding:
    """The first request with this key is still deciding (its publish under way
    or failing) for up to `wait_ms`: ask again once it has decided."""

    order_id: str
    wait_ms: int


def order_place(*, user_id: int, token: str, sku_id: str, quantity: int, idempotency_key: str,
                prior: KeyClaim | None = None) -> PlacedOrder:
    """Take stock in Redis, then publish the confirm; never touches MySQL.

    Redis first: a crash after the take can only under-sell until the orphan
    sweep re-publishes the reservation, never oversell. `prior` is what this
    key already made (read with the token, in the same round trip): a retry is
    answered with that order, another body with 422, whatever the SKU.

    At most three steps, each explicit below: the first try, once more after
    waiting for the first request with this key to decide, and once more with
    a fresh order id after that first request was undone.
    """
    click = _Click(token, user_id, sku_id, quantity, idempotency_key, time.monotonic())
    claim, waited, fresh = prior, False, False
    while True:
        step = _reserve_again(click, claim) if claim is not None else _reserve_new(click)
        if isinstance(step, PlacedOrder):
            return step
        if isinstance(step, KeyClaim):  # another request claimed the key first: answer as a retry
            claim = step
        elif isinstance(step, _Deciding) and waited:  # it had its window: its order stands
            return PlacedOrder(step.order_id, sku_id, quantity, created=False, reserved_ms=0)
        elif isinstance(step, _Deciding):
            with admission.idle():  # a sleep: its web slot serves other clicks meanwhile
                time.sleep(min(step.wait_ms, gate.decision_window_ms()) / 1000)
            claim, waited = KeyClaim(order_id=step.order_id, sku_id=sku_id, quantity=quantity, claimed_ms=0), True
        else:  # _Retired: the key is free again, once, under a fresh order id
            _forget(click, step.order_id)
            if fresh:
                raise Unavailable()
            # a new reservation: its publish budget starts now, as any click's
            claim, fresh = None, True
            click = replace(click, started=time.monotonic())


def order_id_new(*, sku_id: str) -> str:
    """32 hex digits: the SKU's order tag, then 24 random ones (96 bits, of
    which uuid4 fixes two nibbles). The tag lets the payment webhook find an
    order still in flight from its id alone (orders.selectors.order_in_flight)."""
    return order_tag(sku_id) + uuid.uuid4().hex[8:]


def _reserve_new(click: _Click) -> PlacedOrder | KeyClaim:
    """A key never used before: claim it and reserve, in one round trip (the
    claim in the token's slot, the reserve in the SKU's). Of two requests with
    the same key, exactly one claim wins; the other gets the winner's claim."""
    if _sold_out_until.get(click.sku_id, 0.0) > time.monotonic():
        # A key never used before cannot be a retry: "sold out" is its answer.
        raise SoldOut(sku_id=click.sku_id)
    order_id = order_id_new(sku_id=click.sku_id)
    try:
        won, raw = run_together(
            token_cache.key_claim_call(token=click.token, idempotency_key=click.key, quantity=click.quantity,
                                       order_id=order_id, sku_id=click.sku_id),
            gate.reserve_call(sku_id=click.sku_id, user_id=click.user_id, quantity=click.quantity,
                              idempotency_key=click.key, order_id=order_id))
        other, result = token_cache.key_claim_result(won), gate.reserve_result(raw)
    except RedisError as exc:
        _unavailable_after_redis_error(click, order_id, exc)
    if other is not None:
        # Ours took stock for nothing (not published yet): it goes back.
        if result.code is Reserve.OK:
            _undo_quietly(click.sku_id, order_id)
        return other
    return _answer(click, order_id, result)


def _reserve_again(click: _Click, claim: KeyClaim) -> PlacedOrder | _Retired | _Deciding:
    """The key was used before: the same body is answered with that order
    (taking its stock now if the first request never got that far); another
    body is 422."""
    if claim.sku_id != click.sku_id or claim.quantity != click.quantity:
        raise IdempotencyKeyReused(order_id=claim.order_id)
    try:
        result = gate.reserve(sku_id=click.sku_id, user_id=click.user_id, quantity=click.quantity,
                              idempotency_key=click.key, order_id=claim.order_id)
    except RedisError as exc:
        _unavailable_after_redis_error(click, claim.order_id, exc)
    if result.code is Reserve.RETIRED:
        return _Retired(claim.order_id)
    return _answer(click, claim.order_id, result)


def _refuse(click: _Click, result: ReserveResult) -> NoReturn:
    """Raise the refusal the gate's code stands for (nothing was taken)."""
    if result.code is Reserve.KEY_REUSED:
        raise IdempotencyKeyReused(order_id=result.order_id)
    if result.code is Reserve.SOLD_OUT:
        if result.value <= 0 and result.epoch <= MEMO_EPOCH:
            _sold_out_until[click.sku_id] = time.monotonic() + settings.SECKILL_SOLD_OUT_MEMO_SECONDS
        raise SoldOut(sku_id=click.sku_id, available=result.value)
    if result.code is Reserve.LIMIT_REACHED:
        raise LimitReached(sku_id=click.sku_id, held=result.value, limit=result.limit)
    if result.code is Reserve.NOT_ACTIVE:
        raise SaleNotActive(sku_id=click.sku_id)
    if result.code is Reserve.UNKNOWN_SKU:
        raise SkuNotFound(sku_id=click.sku_id)
    # FENCED: Redis lost this SKU and its rebuild waits behind the broker;
    # NOT_WARMED right after a warm: Redis is losing data. Nothing was taken.
    raise Unavailable()


def _answer(click: _Click, order_id: str, result: ReserveResult) -> PlacedOrder | _Deciding:
    """What the gate's answer means for the request: a 202 (published), a
    replay of the key's order, a wait for the first request, or a refusal."""
    if result.code is Reserve.NOT_WARMED:
        result = _warm_and_reserve(click, order_id)
    if result.code is Reserve.OK:
        reservation = Reservation(order_id, click.sku_id, click.user_id, click.quantity, click.key,
                                  result.reserved_ms, result.epoch, result.unit_price)
        _publish_or_undo(click, reservation)
        return PlacedOrder(order_id, click.sku_id, click.quantity, created=True, reserved_ms=result.reserved_ms)
    if result.code is Reserve.DUPLICATE:
        if result.wait_ms > 0:
            # Answered once it has decided, so a 202 here never names an order
            # its own request then gives up.
            return _Deciding(result.order_id, result.wait_ms)
        return PlacedOrder(result.order_id, click.sku_id, click.quantity, created=False, reserved_ms=0)
    # Refused: the key claims nothing, so the client may fix the body and retry.
    _forget(click, order_id)
    _refuse(click, result)


def _warm_and_reserve(click: _Click, order_id: str) -> ReserveResult:
    """Redis never had this SKU: load it from MySQL, once, then reserve. One
    that Redis had and lost is fenced instead (503 until its rebuild is exact)."""
    try:
        warm = stock_warm(sku_id=click.sku_id)
        if warm is Warm.UNKNOWN:
            return ReserveResult(Reserve.UNKNOWN_SKU)
        if warm is Warm.FENCED:
            return ReserveResult(Reserve.FENCED)
        if warm is Warm.RETIRED:  # ended, its keys dropped by retention: closed, not lost
            return ReserveResult(Reserve.NOT_ACTIVE)
        return gate.reserve(sku_id=click.sku_id, user_id=click.user_id, quantity=click.quantity,
                            idempotency_key=click.key, order_id=order_id)
    except RedisError as exc:
        _unavailable_after_redis_error(click, order_id, exc)


def _publish_or_undo(click: _Click, reservation: Reservation) -> None:
    """The 202 needs the broker's confirm within the budget. Otherwise the take
    is undone, unless a consumer already holds it or MySQL already confirmed it
    (the broker stored the message after all): then the order goes on and the
    client gets its 202. An undone reservation is also recorded in MySQL, so a
    copy the broker may still deliver can never become an order."""
    deadline = click.started + settings.SECKILL_PUBLISH_BUDGET_MS / 1000
    try:
        group_publisher.publish_confirm(reservation, deadline=deadline)
        if time.monotonic() <= deadline:
            return
        logger.warning("publish of %s confirmed past the budget; undoing it", reservation.order_id)
    except Exception as exc:  # any broker failure: undo the take, answer 503
        logger.warning("publish failed for %s: %r", reservation.order_id, exc)
    if _take_back(click, reservation.order_id, published=True):
        raise Unavailable()


def _take_back(click: _Click, order_id: str, *, published: bool) -> bool:
    """Undo this request's take, so that its 503 keeps the promise that
    nothing was taken. Returns False when the order goes on after all (a
    consumer holds it, or MySQL confirmed it: the broker had the message).

    The undo is decided in MySQL too whenever a copy of the message may exist
    (`published`), so that copy can never become an order; and when Redis
    cannot say whether it undid anything. MySQL away as well: the Redis record
    of the undo is all there is."""
    outcome = _undo_quietly(click.sku_id, order_id)
    if outcome in (UndoOutcome.HELD, UndoOutcome.DONE):
        return False
    if published or outcome is None:
        try:
            if _undo_record(click, order_id) not in (None, ReservationDecision.Outcome.UNDONE):
                return False  # the confirm won the race: the order exists
        except Exception as exc:
            logger.error("undo of %s not recorded in MySQL: %r", order_id, exc)
    _forget(click, order_id)
    return True


def _reservation(click: _Click, order_id: str) -> Reservation:
    return Reservation(order_id, click.sku_id, click.user_id, click.quantity, click.key, 0)


UNDONE_AT_REQUEST = "undone by its request: its publish failed"


def _undo_record(click: _Click, order_id: str) -> str | None:
    """Decide the reservation undone in MySQL; None when this call did, or the
    outcome decided before (a second undo of the same take finds its own)."""
    return reservation_undo_record(reservation=_reservation(click, order_id), reason=UNDONE_AT_REQUEST,
                                      actor=f"user:{click.user_id}")


def _undo_quietly(sku_id: str, order_id: str) -> UndoOutcome | None:
    for attempt in range(3):
        try:
            return gate.undo(sku_id=sku_id, order_id=order_id)
        except RedisError:
            time.sleep(0.05 * (attempt + 1))
    logger.error("could not undo reservation %s of %s", order_id, sku_id)
    return None


def _unavailable_after_redis_error(click: _Click, order_id: str, exc: Exception):
    """The reserve's round trip failed. If the connection was refused, the
    script never ran; otherwise it may have run before the connection broke,
    so the take is undone by order id (idempotent; nothing was published)."""
    logger.warning("reserve failed: %r", exc)
    if _never_sent(exc):
        _forget(click, order_id)
    else:
        _take_back(click, order_id, published=False)
    raise Unavailable() from exc


def _never_sent(exc: Exception) -> bool:
    # NotSent: the connect failed, or no part of a cluster call was sent;
    # ShardDown: no node served the slot, or its new instance was being checked.
    return isinstance(exc, (NotSent, ShardDown))


def _forget(click: _Click, order_id: str) -> None:
    # Without Redis, a stale claim sends that key's retries through the gate, which answers them.
    with contextlib.suppress(RedisError):
        token_cache.key_forget(token=click.token, idempotency_key=click.key, order_id=order_id)
