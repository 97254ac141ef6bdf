"""The confirm: reservations the gate accepted become orders in MySQL.

`decide` is the whole rule, a pure function; `reservations_confirm` gathers its
inputs under the SKU row lock, writes what it decided in one transaction per
SKU batch (the decisions first: inventory.services.decisions), then settles the
reservations in Redis. Delivery is at least once; a reservation decided before
(by a confirm, an undo or a replay) is recognised by its decision and follows it.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

from core import db
from core.redis.errors import RedisError
from core.retry import is_transient, until_done
from inventory import selectors as inventory_selectors
from inventory.domain import Reservation, price_of
from inventory.messages.names import CONFIRM_KIND
from inventory.models import ReservationDecision
from inventory.redis import gate
from inventory.redis.keys import Hold
from inventory.services.dead_letters import dead_letter_record
from inventory.services.decisions import DecisionRecord, reservation_decisions_record
from inventory.services.locks import skus_lock
from inventory.services.stock import stock_confirm_take
from orders.models import Order

logger = logging.getLogger(__name__)

STOCK_REFUSAL = "insufficient_stock"
KEY_REFUSAL = "duplicate_idempotency_key"
LIMIT_REFUSAL = "limit_reached"
CLOSED_REFUSAL = "sale_not_active"
# Accepted by a Redis that was lost, and reaching the confirm after the SKU was
# rebuilt behind its fence: the rebuilt snapshot did not count it (its request
# was answered 503 or never answered: a 202 is always ahead of the fence).
STALE_REFUSAL = "snapshot_lost"


@dataclass(frozen=True)
class SaleState:
    """The SKU as MySQL knows it, at the confirm."""

    available: int
    per_user_limit: int
    status: str
    status_changed_ms: int = 0
    starts_ms: int = 0
    ends_ms: int = 0
    epoch: int = 0  # the Redis snapshot load MySQL last recorded

    def open_at(self, ms: int) -> bool:
        """Was the sale open when the gate accepted a reservation at `ms`?
        A pause or an end counts from when ops made it (Redis may have heard
        late); the window counts as MySQL has it."""
        if self.status != "active" and ms >= self.status_changed_ms:
            return False
        if self.starts_ms and ms < self.starts_ms:
            return False
        return not (self.ends_ms and ms >= self.ends_ms)


@dataclass
class Decision:
    accepted: list[Reservation] = field(default_factory=list)
    refused: list[tuple[Reservation, str]] = field(default_factory=list)
    # Decided before, by their ReservationDecision.Outcome.
    confirmed_before: list[str] = field(default_factory=list)
    dropped_before: list[str] = field(default_factory=list)
    returned_before: list[str] = field(default_factory=list)
    undone_before: list[str] = field(default_factory=list)  # never an order

    @property
    def settle_confirmed(self) -> list[str]:
        return [r.order_id for r in self.accepted] + self.confirmed_before

    @property
    def settle_dropped(self) -> list[str]:
        """Refused, the unit dropped: the buyer's count comes back, the unit does not."""
        return [r.order_id for r, why in self.refused if why in DROPPING_REFUSALS] + self.dropped_before

    @property
    def settle_returned(self) -> list[str]:
        """Refused for another reason, or undone: MySQL never took the unit, Redis gets it back."""
        return ([r.order_id for r, why in self.refused if why not in DROPPING_REFUSALS] + self.returned_before
                + self.undone_before)


# Refusals whose unit is dropped, not returned to Redis: Redis was above the
# truth (stock), or the unit is counted by a rebuilt snapshot already (stale).
DROPPING_REFUSALS = (STOCK_REFUSAL, STALE_REFUSAL)


Outcome = ReservationDecision.Outcome


def refusal_outcome(why: str) -> Outcome:
    """The decision a refusal records: whether its unit is dropped or returned."""
    return Outcome.DROPPED if why in DROPPING_REFUSALS else Outcome.RETURNED


_BEFORE = {Outcome.CONFIRMED: "confirmed_before", Outcome.DROPPED: "dropped_before",
           Outcome.RETURNED: "returned_before", Outcome.UNDONE: "undone_before"}


def known_outcome(decision: Decision, order_id: str, outcome: str) -> None:
    getattr(decision, _BEFORE[Outcome(outcome)]).append(order_id)


def decide(*, batch: Sequence[Reservation], decided: dict[str, str],
           keys_taken: set[tuple[int, str]], held: dict[int, int], sale: SaleState) -> Decision:
    """Which reservations become orders. Pure: no store is read or written.

    A reservation decided before (`decided`: order id -> outcome) follows
    that decision. The others, in the order the gate accepted them: one taken by a Redis that was
    lost since and rebuilt without it (an older epoch), whose sale was closed,
    whose (user, key) already made another order, that would pass the per-user
    limit, or that needs more units than MySQL has left, is refused with that
    reason; the others take their units."""
    decision = Decision()
    available = sale.available
    held = dict(held)
    keys_taken = set(keys_taken)
    seen: set[str] = set()
    for r in sorted(batch, key=lambda r: (r.reserved_ms, r.order_id)):
        if r.order_id in seen:
            continue
        seen.add(r.order_id)
        if r.order_id in decided:
            known_outcome(decision, r.order_id, decided[r.order_id])
        elif r.epoch < sale.epoch:
            decision.refused.append((r, STALE_REFUSAL))
        elif not sale.open_at(r.reserved_ms):
            decision.refused.append((r, CLOSED_REFUSAL))
        elif (r.user_id, r.idempotency_key) in keys_taken:
            decision.refused.append((r, KEY_REFUSAL))
        elif held.get(r.user_id, 0) + r.quantity > sale.per_user_limit:
            decision.refused.append((r, LIMIT_REFUSAL))
        elif r.quantity > available:
            decision.refused.append((r, STOCK_REFUSAL))
        else:
            decision.accepted.append(r)
            available -= r.quantity
            held[r.user_id] = held.get(r.user_id, 0) + r.quantity
            keys_taken.add((r.user_id, r.idempotency_key))
    return decision


# --- The transaction ----------------------------------------------------------------

def _epoch_ms(dt: datetime | None) -> int:
    return int(dt.timestamp() * 1000) if dt else 0


def _from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def confirm_in_mysql(*, sku_id: str, batch: Sequence[Reservation]) -> Decision:
    """One transaction: lock the SKU row, read what the decision needs, write
    the orders, and move the buckets and the log through inventory."""
    now = timezone.now()
    with transaction.atomic(durable=True):
        sku = skus_lock(sku_ids=[sku_id]).get(sku_id)
        if sku is None:
            raise LookupError(f"SKU {sku_id} does not exist in MySQL")
        decided = inventory_selectors.reservation_decisions(order_ids=[r.order_id for r in batch])
        fresh = [r for r in batch if r.order_id not in decided]
        users = {r.user_id for r in fresh}
        keys_taken: set[tuple[int, str]] = set()
        held: dict[int, int] = {}
        if fresh:
            keys_taken = set(Order.objects.filter(
                user_id__in=users, idempotency_key__in={r.idempotency_key for r in fresh})
                .values_list("user_id", "idempotency_key"))
            held = dict(Order.objects.filter(
                sku_id=sku_id, user_id__in=users, status__in=[Order.Status.PENDING_PAYMENT, Order.Status.PAID])
                .values("user_id").annotate(units=Sum("quantity")).values_list("user_id", "units"))
        sale = SaleState(available=sku.available_stock, per_user_limit=sku.per_user_limit, status=sku.status,
                         status_changed_ms=_epoch_ms(sku.status_changed_at), starts_ms=_epoch_ms(sku.sale_starts_at),
                         ends_ms=_epoch_ms(sku.sale_ends_at), epoch=sku.redis_epoch)
        decision = decide(batch=batch, decided=decided, keys_taken=keys_taken, held=held, sale=sale)
        if not decision.accepted and not decision.refused:
            return decision
        _decisions_record(sku_id, decision, now)
        stock_confirm_take(sku=sku, accepted=decision.accepted, refused=decision.refused, now=now)
        _orders_insert(sku_id, decision, now, fallback_price=sku.price)
    if decision.refused:
        logger.warning("confirm of %s refused %d reservation(s): %s", sku_id, len(decision.refused),
                       [(r.order_id, why) for r, why in decision.refused[:20]])
    return decision


class DecidedMeanwhile(Exception):
    """An undo or a replay decided some of the batch between the confirm's read
    and its write: the transaction is rolled back and the batch read again."""


def _decisions_record(sku_id: str, decision: Decision, now: datetime) -> None:
    earlier = reservation_decisions_record(now=now, decisions=(
        [DecisionRecord(r.order_id, sku_id, Outcome.CONFIRMED, actor=f"user:{r.user_id}") for r in decision.accepted]
        + [DecisionRecord(r.order_id, sku_id, refusal_outcome(why), reason=why, actor=f"user:{r.user_id}")
           for r, why in decision.refused]))
    if earlier:
        raise DecidedMeanwhile(sorted(earlier))


# Only the columns the confirm sets; the others take the model's defaults (core.db.Insert).
_ORDER_INSERT = db.Insert(Order, ("order_id", "user", "sku", "quantity", "unit_price", "amount", "currency",
                                  "status", "idempotency_key", "failure_reason", "bucket", "created_at",
                                  "confirmed_at", "expires_at", "closed_at", "updated_at"))


def _orders_insert(sku_id: str, decision: Decision, now: datetime, *, fallback_price: Decimal) -> None:
    """The orders of a batch, each at the price its reservation carries (the
    gate's at the click); one taken before prices were kept has none and costs
    the SKU's price of now."""
    expires_at = now + timedelta(seconds=settings.SECKILL_PAYMENT_TIMEOUT_SECONDS)
    currency = settings.SECKILL_CURRENCY

    def row(r: Reservation, **kw) -> dict:
        price = price_of(r.unit_price)
        price = fallback_price if price is None else price
        return {"order_id": r.order_id, "user": r.user_id, "sku": sku_id, "quantity": r.quantity,
                "unit_price": price, "amount": price * r.quantity, "currency": currency,
                "created_at": _from_ms(r.reserved_ms), "confirmed_at": now, "updated_at": now, **kw}

    _ORDER_INSERT.run(
        [row(r, status=Order.Status.PENDING_PAYMENT, idempotency_key=r.idempotency_key, failure_reason="",
             bucket=Order.Bucket.LOCKED, expires_at=expires_at, closed_at=None) for r in decision.accepted]
        # a refusal keeps its key unless the key belongs to the other order already
        + [row(r, status=Order.Status.FAILED, idempotency_key=None if why == KEY_REFUSAL else r.idempotency_key,
               failure_reason=why, bucket=Order.Bucket.NONE, expires_at=None, closed_at=now)
           for r, why in decision.refused])


@dataclass(frozen=True)
class ConfirmOutcome:
    sku_id: str
    confirmed: int = 0
    dropped: int = 0  # refused with their unit dropped
    dead: int = 0


def reservations_confirm(*, reservations: Sequence[Reservation],
                         idle: Callable[[], None] | None = None) -> list[ConfirmOutcome]:
    """Make reservations orders, one transaction per SKU and batch.

    Returns only once MySQL has every reservation (or has set the ones it can
    never take aside as dead letters): a store that is away is waited out,
    however long, and `idle` runs meanwhile. Anything else that fails is split
    until the one reservation that fails is found, so it cannot block the rest.
    """
    by_sku: dict[str, dict[str, Reservation]] = {}
    for r in reservations:
        by_sku.setdefault(r.sku_id, {})[r.order_id] = r
    size = settings.SECKILL_CONFIRM_BATCH
    batches = [(sku_id, list(own.values())) for sku_id, own in by_sku.items()]
    return [_confirm_batch(sku_id, items[i:i + size], idle)
            for sku_id, items in batches for i in range(0, len(items), size)]


def _confirm_batch(sku_id: str, own: list[Reservation], idle) -> ConfirmOutcome:
    try:
        states, held = gate.hold(sku_id=sku_id, order_ids=[r.order_id for r in own])
    except RedisError as exc:
        # Redis is away: the message bodies are the copy, and MySQL's order ids,
        # reservation decisions and conditional UPDATE keep the confirm exact.
        # Settling waits for Redis (the orphan sweep settles what it finds).
        logger.warning("Redis unavailable (%r): confirming %d reservation(s) from their messages", exc, len(own))
        states, held = {r.order_id: Hold.MISSING for r in own}, []
    batch = held + [r for r in own if states[r.order_id] is Hold.MISSING]
    if not batch:
        return ConfirmOutcome(sku_id)
    decision, dead = _decide_splitting(sku_id, batch, idle)
    try:
        gate.settle(sku_id=sku_id, confirmed=decision.settle_confirmed, dropped=decision.settle_dropped,
                    returned=decision.settle_returned + dead)
    except RedisError as exc:  # committed in MySQL; the orphan sweep settles it later
        logger.warning("settle of %d reservation(s) of %s deferred: %r", len(batch), sku_id, exc)
    return ConfirmOutcome(sku_id, len(decision.settle_confirmed), len(decision.settle_dropped), len(dead))


def _decide_splitting(sku_id: str, batch: list[Reservation], idle) -> tuple[Decision, list[str]]:
    """Confirm a batch, waiting out transient failures; a batch that fails for
    another reason is halved until the failing reservation is alone, and that
    one becomes a dead letter (its unit goes back to Redis)."""
    def attempt() -> Decision:
        try:
            return confirm_in_mysql(sku_id=sku_id, batch=batch)
        except (DecidedMeanwhile, IntegrityError):
            # An undo or a replay decided some of the batch between the read and
            # the write (or a key's order landed): read again once before
            # treating it as this batch's own fault.
            return confirm_in_mysql(sku_id=sku_id, batch=batch)

    try:
        return until_done(attempt, idle=idle, what=f"confirm of {sku_id}"), []
    except Exception as exc:
        if is_transient(exc):
            raise
        if len(batch) == 1:
            r = batch[0]
            logger.error("reservation %s of %s cannot be confirmed: %r", r.order_id, sku_id, exc)
            dead_letter_record(task_name=CONFIRM_KIND, payload={
                "order_id": r.order_id, "sku_id": r.sku_id, "user_id": r.user_id, "quantity": r.quantity,
                "idempotency_key": r.idempotency_key, "reserved_ms": r.reserved_ms, "epoch": r.epoch,
                "unit_price": r.unit_price},
                reason=f"{exc.__class__.__name__}: {exc}")
            return Decision(), [r.order_id]
        half = len(batch) // 2
        first, dead_a = _decide_splitting(sku_id, batch[:half], idle)
        second, dead_b = _decide_splitting(sku_id, batch[half:], idle)
        merged = Decision()
        for part in (first, second):
            for name in ("accepted", "refused", "confirmed_before", "dropped_before", "returned_before",
                         "undone_before"):
                getattr(merged, name).extend(getattr(part, name))
        return merged, dead_a + dead_b


def reservations_settle_known(*, sku_id: str, decided: dict[str, str]) -> Decision:
    """Settle in Redis reservations MySQL already decided (`decided`: order id ->
    ReservationDecision.Outcome), as their decision says: the confirm (or an
    undo) committed, but its process died before settling."""
    decision = Decision()
    for order_id, outcome in decided.items():
        known_outcome(decision, order_id, outcome)
    gate.settle(sku_id=sku_id, confirmed=decision.settle_confirmed, dropped=decision.settle_dropped,
                returned=decision.settle_returned)
    return decision
