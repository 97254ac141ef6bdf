"""Stock moves in MySQL: the confirm's take, and the ops moves (freeze, unfreeze,
restock, write-off). Takes start in Redis, gives start in MySQL
(docs/architecture.md, "Take in Redis, give in MySQL"). Also the repairs of
Redis's available that reconciliation decides, with their log rows."""
from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from core import db
from core.errors import InvalidInput, SkuNotFound, StockActionRefused, StockRefused, Unavailable
from core.retry import with_mysql_retry
from inventory.domain import Reservation
from inventory.models import InventoryLog, OutboxMessage, Sku
from inventory.redis import gate, keys as redis_keys, live as redis_live
from inventory.services.gives import GiveRecord, outbox_relay, stock_give_record, stock_gives_record
from inventory.services.locks import skus_lock
from inventory.services.snapshots import Warm, stock_warm

logger = logging.getLogger(__name__)


# --- The confirm's take ------------------------------------------------------------

def stock_confirm_take(*, sku: Sku, accepted: Sequence[Reservation],
                       refused: Sequence[tuple[Reservation, str]], now: datetime) -> None:
    """Inside the confirm's transaction, with the SKU row locked and the
    reservations decided (inventory.services.decisions): accepted units move
    available -> locked with one conditional UPDATE; every reservation gets its
    sale log row (pending, or fail with the reason), the audit of the take."""
    units = sum(r.quantity for r in accepted)
    if units:
        moved = Sku.objects.filter(pk=sku.sku_id, available_stock__gte=units).update(
            available_stock=F("available_stock") - units, locked_stock=F("locked_stock") + units, updated_at=now)
        if moved != 1:  # cannot happen while the caller holds the row lock
            raise RuntimeError(f"conditional stock update refused for {sku.sku_id}")
    stock_sale_log(sku_id=sku.sku_id, now=now, rows=(
        [SaleLogRow(r.order_id, r.quantity, ok=True, reason="order confirmed", actor=f"user:{r.user_id}")
         for r in accepted]
        + [SaleLogRow(r.order_id, r.quantity, ok=False, reason=f"refused by MySQL: {why}", actor=f"user:{r.user_id}")
           for r, why in refused]))


@dataclass(frozen=True)
class SaleLogRow:
    """A reservation's sale log row: `ok` is a take MySQL made (pending until
    the mover settles it sold or given back), otherwise a take that never was."""

    order_id: str
    quantity: int
    ok: bool
    reason: str
    actor: str


_SALE_LOG = db.Insert(InventoryLog, ("sku", "operation", "quantity", "order_id", "op_id", "status", "reason", "actor",
                                     "created_at", "updated_at"))


def stock_sale_log(*, sku_id: str, rows: Sequence[SaleLogRow], now: datetime) -> None:
    """Write sale (DECR) log rows, in one INSERT: the only place they are
    created (the mover then sets their status, `stock_moves_apply`)."""
    pending, fail = InventoryLog.Status.PENDING, InventoryLog.Status.FAIL
    _SALE_LOG.run({"sku": sku_id, "operation": InventoryLog.Operation.DECR, "quantity": r.quantity,
                   "order_id": r.order_id, "op_id": r.order_id, "status": pending if r.ok else fail,
                   "reason": r.reason[:255], "actor": r.actor[:150], "created_at": now, "updated_at": now}
                  for r in rows)


@dataclass(frozen=True)
class Sale:
    order_id: str
    quantity: int


@dataclass(frozen=True)
class GiveBack:
    """A cancelled or expired order's units, given back from locked to available."""

    order_id: str
    quantity: int
    user_id: int
    reason: str
    actor: str


def stock_moves_apply(*, sku: Sku, sold: Sequence[Sale], given_back: Sequence[GiveBack]) -> None:
    """Inside the caller's transaction, with the SKU row locked: paid orders'
    units move locked -> sold, given-back orders' locked -> available, in one
    conditional UPDATE; the sale log rows become success (paid) or fail (given
    back), and each give gets its INCR log row and outbox row (MySQL first:
    Redis hears of it only through the outbox, after commit)."""
    if not sold and not given_back:
        return
    now = timezone.now()
    to_sold = sum(s.quantity for s in sold)
    back = sum(r.quantity for r in given_back)
    moved = Sku.objects.filter(pk=sku.sku_id, locked_stock__gte=to_sold + back).update(
        locked_stock=F("locked_stock") - (to_sold + back), sold_stock=F("sold_stock") + to_sold,
        available_stock=F("available_stock") + back, updated_at=now)
    if moved != 1:
        raise RuntimeError(f"locked stock of {sku.sku_id} below the moves being applied")
    if sold:
        InventoryLog.objects.filter(order_id__in=[s.order_id for s in sold], operation=InventoryLog.Operation.DECR
                                    ).update(status=InventoryLog.Status.SUCCESS, updated_at=now)
    for reason in {r.reason for r in given_back}:
        InventoryLog.objects.filter(order_id__in=[r.order_id for r in given_back if r.reason == reason],
                                    operation=InventoryLog.Operation.DECR).update(
            status=InventoryLog.Status.FAIL, reason=reason, updated_at=now)
    if given_back:
        stock_gives_record(sku_id=sku.sku_id, gives=[
            # the op id keeps its stored spelling (gives in flight are found by it)
            GiveRecord(op_id=f"{r.order_id}:release", quantity=r.quantity, user_id=r.user_id, order_id=r.order_id,
                       reason=r.reason, actor=r.actor) for r in given_back])


# --- Ops moves --------------------------------------------------------------------------

def _positive(quantity: int) -> None:
    if not isinstance(quantity, int) or isinstance(quantity, bool) or quantity < 1:
        raise InvalidInput("The quantity must be a whole number of 1 or more.")


class _Resolved(Exception):
    """The freeze's intent was resolved by the stale-intent sweep meanwhile."""


def stock_freeze(*, sku_id: str, quantity: int, reason: str, actor: str) -> str:
    """Take `quantity` units out of sale. A take: Redis first (refused if Redis
    has fewer available), then MySQL's conditional UPDATE; if MySQL refuses,
    the Redis take is undone and the refusal logged.

    A pending log row (the intent) is written before the Redis take, so a
    snapshot loaded or a reconciliation run in between counts the freeze, and a
    freeze whose process died is resolved by `stock_freezes_resolve`."""
    _positive(quantity)
    warm = stock_warm(sku_id=sku_id, load_retired=True)  # a take needs the snapshot, even of an ended SKU
    if warm is Warm.UNKNOWN:
        raise SkuNotFound(sku_id=sku_id)
    if warm is Warm.FENCED:
        raise Unavailable("Redis lost this SKU; it is rebuilt within seconds, once the confirms before the "
                          "loss are in MySQL. Try again then.")
    op_id = f"freeze:{uuid.uuid4().hex}"
    InventoryLog.objects.create(sku_id=sku_id, operation=InventoryLog.Operation.FREEZE, quantity=quantity,
                                op_id=op_id, status=InventoryLog.Status.PENDING, reason=reason, actor=actor)

    def fail(why: str) -> None:
        InventoryLog.objects.filter(op_id=op_id, status=InventoryLog.Status.PENDING).update(
            status=InventoryLog.Status.FAIL, reason=f"{why}: {reason}"[:255])

    outcome = gate.freeze(sku_id=sku_id, op_id=op_id, quantity=quantity)
    if outcome is redis_keys.Freeze.REFUSED:
        fail("refused by Redis (fewer available)")
        live = redis_live.live_stock(sku_id=sku_id)
        raise StockActionRefused(f"Only {live.available if live else 0} unit(s) are available in Redis; "
                                 f"nothing was frozen.")
    if outcome is redis_keys.Freeze.NOT_WARM:
        fail("no snapshot in Redis")
        raise Unavailable("Redis has no snapshot of this SKU right now; try again.")

    def take() -> None:
        with transaction.atomic(durable=True):
            skus_lock(sku_ids=[sku_id])
            if not InventoryLog.objects.filter(op_id=op_id, status=InventoryLog.Status.PENDING).update(
                    status=InventoryLog.Status.SUCCESS):
                # A retry after a COMMIT whose answer was lost finds its own
                # success; only a sweep's cancel (FAIL) means nothing moved.
                if InventoryLog.objects.filter(op_id=op_id, status=InventoryLog.Status.SUCCESS).exists():
                    return
                raise _Resolved()
            moved = Sku.objects.filter(pk=sku_id, available_stock__gte=quantity).update(
                available_stock=F("available_stock") - quantity, frozen_stock=F("frozen_stock") + quantity,
                updated_at=timezone.now())
            if moved != 1:
                raise StockRefused()

    try:
        with_mysql_retry(take)
    except _Resolved:
        raise StockActionRefused("The freeze took too long and was cancelled; nothing was frozen.") from None
    except StockRefused as exc:
        gate.give(sku_id=sku_id, op_id=f"{op_id}:undo", quantity=quantity, frozen_delta=-quantity)
        fail("refused by MySQL (fewer available there)")
        raise StockActionRefused("MySQL has fewer units available than Redis; nothing was frozen.") from exc
    # Any other failure (MySQL away) leaves the intent pending: the sweep resolves it.
    return op_id


FREEZE_INTENT_DEADLINE = timedelta(seconds=60)


def stock_freezes_resolve(*, older_than: timedelta = FREEZE_INTENT_DEADLINE, limit: int = 100) -> int:
    """Freezes whose process died between their intent and their MySQL move:
    cancel each (MySQL first, so the freeze itself can no longer complete),
    then give its Redis take back if it happened, or block it if it did not."""
    stale = list(InventoryLog.objects.filter(
        operation=InventoryLog.Operation.FREEZE, status=InventoryLog.Status.PENDING,
        created_at__lte=timezone.now() - older_than).values_list("sku_id", "op_id", "quantity")[:limit])
    resolved = 0
    for sku_id, op_id, quantity in stale:
        if not InventoryLog.objects.filter(op_id=op_id, status=InventoryLog.Status.PENDING).update(
                status=InventoryLog.Status.FAIL, reason="cancelled: the freeze never completed"):
            continue
        gate.freeze_cancel(sku_id=sku_id, op_id=op_id, quantity=quantity)
        resolved += 1
        logger.warning("stale freeze %s of %s cancelled", op_id, sku_id)
    return resolved


def _give_move(*, sku_id: str, operation: str, quantity: int, reason: str, actor: str,
               condition: dict, changes: dict, redis_available: int, total_delta: int = 0,
               frozen_delta: int = 0, refusal: str) -> str:
    """A give: one MySQL transaction moves the buckets and writes the outbox row."""
    _positive(quantity)
    op_id = f"{operation.lower()}:{uuid.uuid4().hex}"

    def move() -> int | None:
        with transaction.atomic(durable=True):
            if not skus_lock(sku_ids=[sku_id]):
                raise SkuNotFound(sku_id=sku_id)
            done = OutboxMessage.objects.filter(op_id=op_id).values_list("pk", flat=True).first()
            if done is not None:
                return done  # a retry after a COMMIT whose answer was lost: it is done
            moved = Sku.objects.filter(pk=sku_id, **condition).update(**changes, updated_at=timezone.now())
            if moved != 1:
                raise StockActionRefused(refusal)
            stock_give_record(sku_id=sku_id, quantity=redis_available, op_id=op_id, reason=reason, actor=actor,
                              operation=operation, total_delta=total_delta, frozen_delta=frozen_delta,
                              log_quantity=quantity)
            return None

    done = with_mysql_retry(move)
    if done is not None:
        # The lost COMMIT took its on_commit relay with it: send the give now
        # rather than at the outbox sweep.
        outbox_relay(ids=[done])
    return op_id


def stock_unfreeze(*, sku_id: str, quantity: int, reason: str, actor: str) -> str:
    return _give_move(
        sku_id=sku_id, operation=InventoryLog.Operation.UNFREEZE, quantity=quantity, reason=reason, actor=actor,
        condition={"frozen_stock__gte": quantity},
        changes={"frozen_stock": F("frozen_stock") - quantity, "available_stock": F("available_stock") + quantity},
        redis_available=quantity, frozen_delta=-quantity,
        refusal=f"Fewer than {quantity} unit(s) are frozen; nothing was unfrozen.")


def stock_restock(*, sku_id: str, quantity: int, reason: str, actor: str) -> str:
    return _give_move(
        sku_id=sku_id, operation=InventoryLog.Operation.RESTOCK, quantity=quantity, reason=reason, actor=actor,
        condition={},
        changes={"total_stock": F("total_stock") + quantity, "available_stock": F("available_stock") + quantity},
        redis_available=quantity, total_delta=quantity, refusal="Restock refused.")


def stock_write_off(*, sku_id: str, quantity: int, reason: str, actor: str) -> str:
    return _give_move(
        sku_id=sku_id, operation=InventoryLog.Operation.WRITE_OFF, quantity=quantity, reason=reason, actor=actor,
        condition={"frozen_stock__gte": quantity},
        changes={"frozen_stock": F("frozen_stock") - quantity, "total_stock": F("total_stock") - quantity},
        redis_available=0, total_delta=-quantity, frozen_delta=-quantity,
        refusal=f"Fewer than {quantity} unit(s) are frozen; nothing was written off.")


# --- Repairs of the gate (reconciliation decides them) -----------------------------------

def stock_repair(*, sku_id: str, repair_id: str, delta: int, why: str, actor: str) -> int | None:
    """Move Redis's available by `delta` once per `repair_id` (a call repeated
    after a lost reply changes nothing more), and record the REPAIR log row.
    Returns Redis's available after it, None when already applied or Redis has
    no snapshot. MySQL's buckets do not move: a repair brings Redis to them."""
    after = gate.adjust_available(sku_id=sku_id, repair_id=repair_id, delta=delta)
    InventoryLog.objects.create(
        sku_id=sku_id, operation=InventoryLog.Operation.REPAIR, quantity=abs(delta), op_id=repair_id[:64],
        status=InventoryLog.Status.SUCCESS, actor=actor,
        reason=f"redis available {'+' if delta > 0 else ''}{delta} -> {after}; {why}"[:255])
    return after
