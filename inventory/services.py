"""Every write to stock. Takes start in Redis, gives start in MySQL (DESIGN.md)."""
from __future__ import annotations

import logging
import random
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone as dt_timezone
from decimal import Decimal
from typing import Callable, Iterable, TypeVar

from django.conf import settings
from django.db import IntegrityError, OperationalError, transaction
from django.db.models import F, Sum
from django.utils import timezone

from inventory import redis_store, selectors
from inventory.errors import InvalidInput, SkuNotFound, StockActionRefused, StockRefused, Unavailable
from inventory.models import ConsumerDedup, DeadLetter, InventoryLog, OutboxMessage, Sku

logger = logging.getLogger(__name__)
T = TypeVar("T")

MYSQL_DEADLOCK, MYSQL_LOCK_WAIT_TIMEOUT = 1213, 1205


def with_mysql_retry(fn: Callable[[], T], *, attempts: int = 6) -> T:
    """Run a transaction again on deadlock or lock-wait timeout, with jittered backoff."""
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except OperationalError as exc:
            code = exc.args[0] if exc.args else None
            if code not in (MYSQL_DEADLOCK, MYSQL_LOCK_WAIT_TIMEOUT) or attempt == attempts:
                raise
            logger.warning("mysql %s, retrying (attempt %d)", code, attempt)
            time.sleep(min(0.5, 0.01 * 2**attempt) * (0.5 + random.random()))
    raise AssertionError("unreachable")


def skus_lock(*, sku_ids: Iterable[str]) -> dict[str, Sku]:
    """The one place stock rows are locked: always by primary key order, and
    before any order row. (Locking the order row first and the SKU row last
    was tried to shorten the hot row's lock: the foreign-key checks of the log
    and outbox inserts take a shared lock on the SKU row, and the shared-to-
    exclusive upgrades deadlocked under the pay/cancel/expiry race test.)"""
    ids = sorted(set(sku_ids))
    return {s.sku_id: s for s in Sku.objects.select_for_update().filter(pk__in=ids).order_by("pk")}


# --- SKUs and snapshots -------------------------------------------------------

def sku_create(
    *,
    sku_id: str,
    stock: int,
    name: str = "",
    per_user_limit: int = 1,
    price: Decimal | int | str = 0,
    starts_at: datetime | None = None,
    ends_at: datetime | None = None,
    actor: str = "",
) -> Sku:
    """Create a SKU on sale (from now unless told otherwise) and warm its snapshot
    once the row is committed (the admin calls this inside its own transaction)."""
    with transaction.atomic():
        sku = Sku.objects.create(
            sku_id=sku_id,
            name=name or sku_id,
            price=Decimal(str(price)),
            total_stock=stock,
            available_stock=stock,
            per_user_limit=per_user_limit,
            sale_starts_at=starts_at or timezone.now(),
            sale_ends_at=ends_at,
        )
        if stock:
            InventoryLog.objects.create(
                sku=sku, operation=InventoryLog.Operation.RESTOCK, quantity=stock,
                status=InventoryLog.Status.SUCCESS, reason="initial stock", actor=actor,
            )
        transaction.on_commit(lambda: (redis_store.clear_missing(sku_id=sku_id), stock_warm(sku_id=sku_id)))
    return sku


def stock_warm(*, sku_id: str) -> bool:
    """Load the SKU's snapshot into Redis if it is absent. False if MySQL has no such SKU.

    Under a short lock so two processes never load twice; the load itself
    refuses to overwrite a snapshot that appeared meanwhile.
    """
    if redis_store.snapshot_exists(sku_id=sku_id):
        return True
    token = redis_store.warm_lock_acquire(sku_id=sku_id)
    if token is None:
        if redis_store.wait_for_snapshot(sku_id=sku_id):
            return True
        return selectors.sku_get(sku_id=sku_id) is not None and stock_warm(sku_id=sku_id)
    try:
        with transaction.atomic():
            # The row lock makes the snapshot consistent with the gives it counts.
            sku = skus_lock(sku_ids=[sku_id]).get(sku_id)
            snapshot = selectors.sku_snapshot(sku=sku) if sku is not None else None
        if sku is None:
            redis_store.mark_missing(sku_id=sku_id)
            return False
        loaded = redis_store.snapshot_load(sku_id=sku_id, snapshot=snapshot)
        if loaded:
            logger.info("warmed %s: available=%s", sku_id, sku.available_stock)
        return True
    finally:
        redis_store.warm_lock_release(sku_id=sku_id, token=token)


# --- The confirm ----------------------------------------------------------------

@dataclass(frozen=True)
class Reservation:
    order_id: str
    sku_id: str
    user_id: int
    quantity: int
    idempotency_key: str
    reserved_ms: int

    def payload(self) -> dict:
        return {
            "order_id": self.order_id, "sku_id": self.sku_id, "user_id": self.user_id,
            "quantity": self.quantity, "idempotency_key": self.idempotency_key,
            "reserved_ms": self.reserved_ms,
        }

    @classmethod
    def from_payload(cls, p: dict) -> "Reservation":
        return cls(
            order_id=str(p["order_id"]), sku_id=str(p["sku_id"]), user_id=int(p["user_id"]),
            quantity=int(p["quantity"]), idempotency_key=str(p["idempotency_key"]),
            reserved_ms=int(p["reserved_ms"]),
        )

    @classmethod
    def from_inflight(cls, sku_id: str, e: redis_store.InFlight) -> "Reservation":
        return cls(e.order_id, sku_id, e.user_id, e.quantity, e.idempotency_key, e.reserved_ms)


@dataclass(frozen=True)
class ConfirmOutcome:
    state: str  # "confirmed" (a transaction ran) or "done" (nothing left to do)
    confirmed: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    given_back: tuple[str, ...] = ()


def reservations_confirm(*, reservations: list[Reservation]) -> list[ConfirmOutcome]:
    """Make reservations orders in MySQL, one transaction per SKU.

    A message carries the reservations one web process accepted together
    (group-commit publishing); the consumer adds other reservations of the same
    SKU waiting in Redis, so one transaction confirms many and their own
    messages later find them done (one Redis call, no MySQL). A redelivered
    message changes nothing.
    """
    by_sku: dict[str, dict[str, Reservation]] = {}
    for r in reservations:
        by_sku.setdefault(r.sku_id, {})[r.order_id] = r
    return [reservation_batch_confirm(sku_id=sku_id, own=list(own.values())) for sku_id, own in by_sku.items()]


def reservation_batch_confirm(*, sku_id: str, own: list[Reservation]) -> ConfirmOutcome:
    try:
        states, claimed = redis_store.claim(
            sku_id=sku_id, order_ids=[r.order_id for r in own],
            batch=max(0, settings.SECKILL_CONFIRM_BATCH - len(own)),
        )
    except redis_store.RedisError as exc:
        # Redis is down: the message bodies are the copy, and MySQL's dedup and
        # conditional UPDATE keep the confirm exact. Settling waits for Redis
        # (the orphan sweep settles confirmed orders it finds still in flight).
        logger.warning("Redis unavailable (%r): confirming %d reservation(s) from their messages", exc, len(own))
        confirmed, failed, given_back = with_mysql_retry(lambda: _confirm_batch_in_mysql(sku_id=sku_id, batch=own))
        return ConfirmOutcome("confirmed", tuple(confirmed), tuple(failed), tuple(given_back))
    batch = [Reservation.from_inflight(sku_id, e) for e in claimed]
    # Redis lost these (flushed or restarted): the message body is the copy.
    batch += [r for r in own if states[r.order_id] == "missing"]
    if not batch:
        return ConfirmOutcome("done")
    try:
        confirmed, failed, given_back = with_mysql_retry(lambda: _confirm_batch_in_mysql(sku_id=sku_id, batch=batch))
    except IntegrityError:
        # One bad reservation (say, its user was deleted) must not block the
        # SKU's whole batch: confirm one by one and set the bad ones aside.
        confirmed, failed, given_back = [], [], []
        for r in batch:
            try:
                c, f, g = with_mysql_retry(lambda r=r: _confirm_batch_in_mysql(sku_id=sku_id, batch=[r]))
            except IntegrityError as exc:
                logger.error("reservation %s cannot be confirmed: %r", r.order_id, exc)
                DeadLetter.objects.create(task_name="confirm", payload=r.payload(),
                                          reason=f"IntegrityError: {exc}"[:255])
                c, f, g = [], [], [r.order_id]
            confirmed += c
            failed += f
            given_back += g
    try:
        redis_store.settle(sku_id=sku_id, confirmed=confirmed, failed=failed, given_back=given_back)
    except redis_store.RedisError as exc:  # committed in MySQL; the orphan sweep settles it later
        logger.warning("settle of %d reservation(s) of %s deferred: %r", len(batch), sku_id, exc)
    return ConfirmOutcome("confirmed", tuple(confirmed), tuple(failed), tuple(given_back))


STOCK_REFUSAL = "insufficient_stock"


def _confirm_batch_in_mysql(*, sku_id: str, batch: list[Reservation]) -> tuple[list[str], list[str], list[str]]:
    """Returns (confirmed, refused for lack of stock, refused for another reason).

    A reservation refused for lack of stock does not give its unit back to
    Redis: Redis was above the truth, and giving it back would sell it again
    only to fail again. One refused for another reason (per-user limit or key
    already used, both possible only after Redis lost its records) gives it
    back, since MySQL kept that unit available."""
    from orders.models import Order

    now = timezone.now()
    expires_at = now + timedelta(seconds=settings.SECKILL_PAYMENT_TIMEOUT_SECONDS)
    with transaction.atomic(durable=True):
        sku = skus_lock(sku_ids=[sku_id]).get(sku_id)
        if sku is None:
            raise LookupError(f"SKU {sku_id} does not exist in MySQL")
        ids = [r.order_id for r in batch]
        known = {
            oid: (st, why)
            for oid, st, why in Order.objects.filter(order_id__in=ids).values_list("order_id", "status", "failure_reason")
        }
        confirmed = [oid for oid, (st, _) in known.items() if st != Order.Status.FAILED]
        failed = [oid for oid, (st, why) in known.items() if st == Order.Status.FAILED and why == STOCK_REFUSAL]
        given_back = [oid for oid, (st, why) in known.items() if st == Order.Status.FAILED and why != STOCK_REFUSAL]
        fresh = sorted((r for r in batch if r.order_id not in known), key=lambda r: (r.reserved_ms, r.order_id))
        if not fresh:
            return confirmed, failed, given_back

        users = {r.user_id for r in fresh}
        keys_taken = set(
            Order.objects.filter(user_id__in=users, idempotency_key__in={r.idempotency_key for r in fresh})
            .values_list("user_id", "idempotency_key")
        )
        held = dict(
            Order.objects.filter(
                sku_id=sku_id, user_id__in=users,
                status__in=[Order.Status.PENDING_PAYMENT, Order.Status.PAID],
            ).values("user_id").annotate(units=Sum("quantity")).values_list("user_id", "units")
        )
        available = sku.available_stock
        accepted: list[Reservation] = []
        refused: list[tuple[Reservation, str]] = []
        seen: set[str] = set()
        for r in fresh:
            if r.order_id in seen:
                continue
            seen.add(r.order_id)
            if (r.user_id, r.idempotency_key) in keys_taken:
                refused.append((r, "duplicate_idempotency_key"))
            elif held.get(r.user_id, 0) + r.quantity > sku.per_user_limit:
                refused.append((r, "limit_reached"))
            elif r.quantity > available:
                refused.append((r, STOCK_REFUSAL))
            else:
                accepted.append(r)
                available -= r.quantity
                held[r.user_id] = held.get(r.user_id, 0) + r.quantity
                keys_taken.add((r.user_id, r.idempotency_key))

        units = sum(r.quantity for r in accepted)
        if units:
            moved = Sku.objects.filter(pk=sku_id, available_stock__gte=units).update(
                available_stock=F("available_stock") - units,
                locked_stock=F("locked_stock") + units,
                updated_at=now,
            )
            if moved != 1:  # cannot happen while we hold the row lock
                raise RuntimeError(f"conditional stock update refused for {sku_id}")

        def created(r: Reservation) -> datetime:
            return datetime.fromtimestamp(r.reserved_ms / 1000, tz=dt_timezone.utc)

        Order.objects.bulk_create(
            [
                Order(order_id=r.order_id, user_id=r.user_id, sku_id=sku_id, quantity=r.quantity,
                      status=Order.Status.PENDING_PAYMENT, idempotency_key=r.idempotency_key,
                      created_at=created(r), confirmed_at=now, expires_at=expires_at)
                for r in accepted
            ]
            + [
                Order(order_id=r.order_id, user_id=r.user_id, sku_id=sku_id, quantity=r.quantity,
                      status=Order.Status.FAILED, failure_reason=why,
                      idempotency_key=None if why == "duplicate_idempotency_key" else r.idempotency_key,
                      created_at=created(r), confirmed_at=now, closed_at=now)
                for r, why in refused
            ]
        )
        InventoryLog.objects.bulk_create(
            [
                InventoryLog(sku_id=sku_id, operation=InventoryLog.Operation.DECR, quantity=r.quantity,
                             order_id=r.order_id, op_id=r.order_id, status=InventoryLog.Status.PENDING,
                             reason="order confirmed", actor=f"user:{r.user_id}")
                for r in accepted
            ]
            + [
                InventoryLog(sku_id=sku_id, operation=InventoryLog.Operation.DECR, quantity=r.quantity,
                             order_id=r.order_id, op_id=r.order_id, status=InventoryLog.Status.FAIL,
                             reason=f"refused by MySQL: {why}", actor=f"user:{r.user_id}")
                for r, why in refused
            ]
        )
        ConsumerDedup.objects.bulk_create(
            [ConsumerDedup(business_id=f"{r.order_id}:confirm", operation="confirm") for r in accepted]
            + [ConsumerDedup(business_id=f"{r.order_id}:confirm", operation="confirm") for r, _ in refused]
        )
        if refused:
            logger.warning("confirm of %s refused %d reservation(s): %s", sku_id, len(refused),
                           [(r.order_id, why) for r, why in refused])
        return (
            confirmed + [r.order_id for r in accepted],
            failed + [r.order_id for r, why in refused if why == STOCK_REFUSAL],
            given_back + [r.order_id for r, why in refused if why != STOCK_REFUSAL],
        )


# --- Gives: MySQL first, then Redis through the outbox -------------------------

def stock_give_record(*, sku_id: str, quantity: int, op_id: str, user_id: int | None = None,
                      order_id: str | None = None, reason: str, actor: str,
                      operation: str = InventoryLog.Operation.INCR, total_delta: int = 0,
                      frozen_delta: int = 0, log_quantity: int | None = None) -> OutboxMessage:
    """Inside the caller's transaction (which already moved the MySQL buckets):
    the log row and the outbox message that will apply the move to Redis."""
    InventoryLog.objects.create(
        sku_id=sku_id, operation=operation, quantity=quantity if log_quantity is None else log_quantity,
        order_id=order_id, op_id=op_id, status=InventoryLog.Status.PENDING, reason=reason, actor=actor,
    )
    message = OutboxMessage.objects.create(
        topic=OutboxMessage.Topic.STOCK_GIVE, sku_id=sku_id, op_id=op_id,
        payload={"sku_id": sku_id, "op_id": op_id, "quantity": quantity, "user_id": user_id,
                 "total_delta": total_delta, "frozen_delta": frozen_delta},
    )
    transaction.on_commit(lambda: outbox_relay(ids=[message.pk]))
    return message


def outbox_relay(*, ids: list[int] | None = None, older_than_s: float = 0, limit: int = 500) -> int:
    """Publish unsent outbox rows (confirmed) and mark them sent. Returns how many.

    Rows are taken with SKIP LOCKED so two relays never send the same row at
    once; a row sent twice anyway (relay died after the publish) is harmless,
    the give is idempotent by its op id.
    """
    from inventory.tasks import publish_give

    sent = 0
    try:
        with transaction.atomic():
            rows = OutboxMessage.objects.select_for_update(skip_locked=True).filter(sent_at__isnull=True)
            if ids is not None:
                rows = rows.filter(pk__in=ids)
            if older_than_s:
                rows = rows.filter(created_at__lte=timezone.now() - timedelta(seconds=older_than_s))
            for row in rows.order_by("pk")[:limit]:
                row.attempts += 1
                try:
                    publish_give(row.payload)
                except Exception as exc:
                    logger.warning("outbox %s not sent: %r", row.op_id, exc)
                    row.save(update_fields=["attempts"])
                    break
                row.sent_at = timezone.now()
                row.save(update_fields=["attempts", "sent_at"])
                sent += 1
    except OperationalError as exc:  # MySQL away: the beat sweep sends later
        logger.warning("outbox relay skipped: %r", exc)
    return sent


def stock_give_apply(*, sku_id: str, op_id: str, quantity: int, user_id: int | None,
                     total_delta: int = 0, frozen_delta: int = 0) -> int:
    """The Redis half of a give, then its log row becomes success. Idempotent."""
    outcome = redis_store.give(sku_id=sku_id, op_id=op_id, quantity=quantity, user_id=user_id,
                               total_delta=total_delta, frozen_delta=frozen_delta)
    InventoryLog.objects.filter(op_id=op_id, status=InventoryLog.Status.PENDING).exclude(
        operation=InventoryLog.Operation.DECR).update(status=InventoryLog.Status.SUCCESS)
    return outcome


def dead_letters_collect(*, limit: int = 500) -> int:
    from seckill_site.celery import app

    moved = 0
    with app.connection_for_write() as conn:
        queue = settings.CELERY_DEAD_LETTER(conn.default_channel)
        queue.declare()
        for _ in range(limit):
            message = queue.get(no_ack=False, accept=["json"])
            if message is None:
                break
            headers = message.headers or {}
            try:
                body = message.decode()
            except Exception:
                body = {"raw": message.body.decode(errors="replace")[:10000]}
            deaths = headers.get("x-death") or [{}]
            DeadLetter.objects.create(
                task_name=str(headers.get("task", "?")),
                payload={"body": body, "id": headers.get("id")},
                reason=f"dead-lettered by RabbitMQ: {deaths[0].get('reason', 'delivery limit')}"[:255],
            )
            message.ack()
            moved += 1
    return moved


# --- Ops stock actions -----------------------------------------------------------

def _positive(quantity: int) -> None:
    if not isinstance(quantity, int) or isinstance(quantity, bool) or quantity < 1:
        raise InvalidInput("The quantity must be a whole number of 1 or more.")


def stock_freeze(*, sku_id: str, quantity: int, reason: str, actor: str) -> str:
    """Take `quantity` units out of sale. A take: Redis first (refused if Redis
    has fewer available), then MySQL's conditional UPDATE; if MySQL refuses,
    the Redis take is undone and the refusal logged."""
    _positive(quantity)
    if not stock_warm(sku_id=sku_id):
        raise SkuNotFound(sku_id=sku_id)
    op_id = f"freeze:{uuid.uuid4().hex}"
    outcome = redis_store.freeze(sku_id=sku_id, op_id=op_id, quantity=quantity)
    if outcome == redis_store.FREEZE_REFUSED:
        live = redis_store.live_stock(sku_id=sku_id)
        raise StockActionRefused(f"Only {live.available if live else 0} unit(s) are available in Redis; "
                                 f"nothing was frozen.")
    if outcome == redis_store.FREEZE_NOT_WARM:
        raise Unavailable("Redis has no snapshot of this SKU right now; try again.")

    def take() -> None:
        with transaction.atomic(durable=True):
            skus_lock(sku_ids=[sku_id])
            moved = Sku.objects.filter(pk=sku_id, available_stock__gte=quantity).update(
                available_stock=F("available_stock") - quantity, frozen_stock=F("frozen_stock") + quantity,
                updated_at=timezone.now())
            if moved != 1:
                raise StockRefused()
            InventoryLog.objects.create(sku_id=sku_id, operation=InventoryLog.Operation.FREEZE, quantity=quantity,
                                        op_id=op_id, status=InventoryLog.Status.SUCCESS, reason=reason, actor=actor)

    try:
        with_mysql_retry(take)
    except Exception as exc:
        # Give the Redis take back (idempotent by its own op id), then report.
        redis_store.give(sku_id=sku_id, op_id=f"{op_id}:undo", quantity=quantity, frozen_delta=-quantity)
        if isinstance(exc, StockRefused):
            InventoryLog.objects.create(sku_id=sku_id, operation=InventoryLog.Operation.FREEZE, quantity=quantity,
                                        op_id=op_id, status=InventoryLog.Status.FAIL, actor=actor,
                                        reason=f"refused by MySQL (fewer available there): {reason}"[:255])
            raise StockActionRefused("MySQL has fewer units available than Redis; nothing was frozen.") from exc
        raise
    return op_id


def _give_move(*, sku_id: str, operation: str, quantity: int, reason: str, actor: str,
               condition: dict, changes: dict, redis_available: int, total_delta: int = 0,
               frozen_delta: int = 0, refusal: str) -> str:
    """A give: one MySQL transaction moves the buckets and writes the outbox row."""
    _positive(quantity)
    op_id = f"{operation.lower()}:{uuid.uuid4().hex}"

    def move() -> None:
        with transaction.atomic(durable=True):
            if not skus_lock(sku_ids=[sku_id]):
                raise SkuNotFound(sku_id=sku_id)
            moved = Sku.objects.filter(pk=sku_id, **condition).update(**changes, updated_at=timezone.now())
            if moved != 1:
                raise StockActionRefused(refusal)
            stock_give_record(sku_id=sku_id, quantity=redis_available, op_id=op_id, reason=reason, actor=actor,
                              operation=operation, total_delta=total_delta, frozen_delta=frozen_delta,
                              log_quantity=quantity)

    with_mysql_retry(move)
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


def snapshot_rebuild(*, sku_id: str, actor: str) -> None:
    """Reload the Redis snapshot from MySQL; refused while reservations are in flight."""
    if selectors.sku_get(sku_id=sku_id) is None:
        raise SkuNotFound(sku_id=sku_id)
    token = redis_store.warm_lock_acquire(sku_id=sku_id)
    if token is None:
        raise StockActionRefused("A warm-up of this SKU is running; try again.")
    try:
        if not redis_store.snapshot_drop_if_idle(sku_id=sku_id):
            raise StockActionRefused("Reservations are in flight; rebuild refused (try after the confirms).")
    finally:
        redis_store.warm_lock_release(sku_id=sku_id, token=token)
    stock_warm(sku_id=sku_id)
    logger.warning("snapshot of %s rebuilt by %s", sku_id, actor)


def sku_sale_data_changed(*, sku: Sku) -> None:
    """After an ops edit of sale data: bump the version and, once committed,
    update Redis in place (sale data only; stock moves by deltas)."""
    Sku.objects.filter(pk=sku.sku_id).update(version=F("version") + 1)
    sku.refresh_from_db(fields=["version"])
    transaction.on_commit(lambda: redis_store.meta_update(
        sku_id=sku.sku_id, per_user_limit=sku.per_user_limit, starts_ms=selectors.epoch_ms(sku.sale_starts_at),
        ends_ms=selectors.epoch_ms(sku.sale_ends_at), status=sku.status, version=sku.version))
