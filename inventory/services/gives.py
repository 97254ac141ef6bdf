"""Gives: MySQL first, then Redis through the transactional outbox; dead letters."""
from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.db import OperationalError, transaction
from django.utils import timezone

from inventory import messages, redis_store
from inventory.models import GIVE_OPERATIONS, DeadLetter, InventoryLog, OutboxMessage

logger = logging.getLogger(__name__)


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
                    messages.publish_give(row.payload)
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


LOST_GIVE_AFTER = timedelta(seconds=60)


def gives_resend_lost(*, older_than: timedelta = LOST_GIVE_AFTER, limit: int = 500) -> list[str]:
    """Gives sent long ago whose log row is still pending (the message was lost,
    or Redis had no snapshot when it came): mark their outbox rows unsent, so
    the relay sends them again. Bounded by `limit` per call."""
    lost = list(InventoryLog.objects.filter(
        status=InventoryLog.Status.PENDING, operation__in=GIVE_OPERATIONS,
        created_at__lte=timezone.now() - older_than).values_list("op_id", flat=True)[:limit])
    if lost:
        OutboxMessage.objects.filter(op_id__in=lost, sent_at__isnull=False).update(sent_at=None)
    return lost


class GiveDeferred(Exception):
    """Redis has no snapshot of the SKU right now: the give waits (the snapshot
    being loaded may not count it)."""


def stock_give_apply(*, sku_id: str, op_id: str, quantity: int, user_id: int | None,
                     total_delta: int = 0, frozen_delta: int = 0, wait_s: float = 5.0) -> redis_store.Give:
    """The Redis half of a give, then its log row becomes success. Idempotent.

    A copy of a give already marked success is dropped here (the snapshot of a
    rebuilt Redis counts it, so its applied marker may be gone). A give that
    finds no snapshot is neither applied nor marked: it waits a moment for the
    snapshot, then is left pending for the resend sweep (never dropped)."""
    done = InventoryLog.objects.filter(op_id=op_id, operation__in=GIVE_OPERATIONS,
                                       status=InventoryLog.Status.SUCCESS).exists()
    if done:
        return redis_store.Give.ALREADY
    deadline = time.monotonic() + wait_s
    while True:
        outcome = redis_store.give(sku_id=sku_id, op_id=op_id, quantity=quantity, user_id=user_id,
                                   total_delta=total_delta, frozen_delta=frozen_delta)
        if outcome is not redis_store.Give.NOT_WARM:
            break
        if time.monotonic() >= deadline:
            raise GiveDeferred(f"no snapshot of {sku_id} for give {op_id}")
        time.sleep(0.2)
    InventoryLog.objects.filter(op_id=op_id, operation__in=GIVE_OPERATIONS,
                                status=InventoryLog.Status.PENDING).update(status=InventoryLog.Status.SUCCESS)
    return outcome


# --- Dead letters ------------------------------------------------------------------------

def dead_letter_record(*, task_name: str, payload: dict, reason: str) -> DeadLetter:
    return DeadLetter.objects.create(task_name=task_name, payload=payload, reason=reason[:255])


def dead_letters_collect(*, limit: int = 500) -> int:
    """Move what RabbitMQ dead-lettered (delivery limit, rejected) into the
    DeadLetter table, where ops see it in the admin."""
    from seckill_site.celery import app

    moved = 0
    with app.connection_for_write() as conn:
        queue = messages.dead_letter_queue()(conn.default_channel)
        queue.declare()
        for _ in range(limit):
            message = queue.get(no_ack=False, accept=["json"])
            if message is None:
                break
            headers = message.headers or {}
            kind = headers.get(messages.KIND_HEADER)
            try:
                body = message.decode() if kind is None else message.body.decode("utf-8", "replace")
            except Exception:
                body = {"raw": message.body.decode(errors="replace")[:10000]}
            deaths = headers.get("x-death") or [{}]
            dead_letter_record(
                task_name=str(kind or headers.get("task", "?")),
                payload={"body": body, "id": headers.get("id"), "headers": {
                    k: v for k, v in headers.items() if isinstance(v, (str, int, float))}},
                reason=f"dead-lettered by RabbitMQ: {deaths[0].get('reason', 'delivery limit')}")
            message.ack()
            moved += 1
    return moved
