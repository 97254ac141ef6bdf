"""Gives: MySQL first, then Redis through the transactional outbox."""
from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import OperationalError, transaction
from django.db.models import F, Q
from django.utils import timezone
from redis.exceptions import ResponseError

from inventory.messages import celery_sends
from inventory.models import GIVE_OPERATIONS, InventoryLog, OutboxMessage
from inventory.redis import gate, keys as redis_keys
from inventory.services.locks import skus_lock

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


@dataclass(frozen=True)
class GiveRecord:
    op_id: str
    quantity: int
    user_id: int | None
    order_id: str | None
    reason: str
    actor: str


def stock_gives_record(*, sku_id: str, gives: Sequence[GiveRecord]) -> None:
    """Many gives of one SKU (inside the caller's transaction, which already
    moved the buckets): their INCR log rows and outbox rows in two inserts, and
    one relay after commit."""
    InventoryLog.objects.bulk_create([
        InventoryLog(sku_id=sku_id, operation=InventoryLog.Operation.INCR, quantity=g.quantity, order_id=g.order_id,
                     op_id=g.op_id, status=InventoryLog.Status.PENDING, reason=g.reason, actor=g.actor)
        for g in gives])
    OutboxMessage.objects.bulk_create([
        OutboxMessage(topic=OutboxMessage.Topic.STOCK_GIVE, sku_id=sku_id, op_id=g.op_id,
                      payload={"sku_id": sku_id, "op_id": g.op_id, "quantity": g.quantity, "user_id": g.user_id,
                               "total_delta": 0, "frozen_delta": 0})
        for g in gives])
    ops = [g.op_id for g in gives]
    transaction.on_commit(lambda: outbox_relay(op_ids=ops))


RELAY_CHUNK = 100


def outbox_relay(*, ids: list[int] | None = None, op_ids: list[str] | None = None, older_than_s: float = 0,
                 limit: int = 2000) -> int:
    """Publish unsent outbox rows, up to RELAY_CHUNK gives per message (each
    confirmed), and mark them sent. Returns how many rows were sent.

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
            if op_ids is not None:
                rows = rows.filter(op_id__in=op_ids)
            if older_than_s:
                rows = rows.filter(created_at__lte=timezone.now() - timedelta(seconds=older_than_s))
            taken = list(rows.order_by("pk")[:limit])
            for i in range(0, len(taken), RELAY_CHUNK):
                chunk = taken[i:i + RELAY_CHUNK]
                try:
                    celery_sends.publish_gives([row.payload for row in chunk])
                except Exception as exc:
                    logger.warning("outbox: %d give(s) not sent: %r", len(chunk), exc)
                    OutboxMessage.objects.filter(pk__in=[r.pk for r in chunk]).update(attempts=F("attempts") + 1)
                    break
                OutboxMessage.objects.filter(pk__in=[r.pk for r in chunk]).update(
                    sent_at=timezone.now(), attempts=F("attempts") + 1)
                sent += len(chunk)
    except OperationalError as exc:  # MySQL away: the beat sweep sends later
        logger.warning("outbox relay skipped: %r", exc)
    return sent


LOST_GIVE_AFTER = timedelta(seconds=60)


def give_retry_delay(*, attempts: int) -> timedelta:
    """How long a give that was sent `attempts` times and is still pending
    waits before it is sent again: base * 2^(attempts - 1), at most the cap."""
    base, cap = settings.SECKILL_GIVE_RETRY_BASE_SECONDS, settings.SECKILL_GIVE_RETRY_CAP_SECONDS
    return timedelta(seconds=min(cap, base * 2 ** min(max(attempts - 1, 0), 32)))


def gives_resend_lost(*, older_than: timedelta = LOST_GIVE_AFTER, limit: int = 500) -> list[str]:
    """Gives sent long ago whose log row is still pending (the message was lost,
    or Redis had no snapshot when it came): mark their outbox rows unsent, so
    the relay sends them again, each no sooner than its backoff allows
    (`give_retry_delay`: a give of a SKU Redis has no snapshot of is not sent
    every sweep for ever). Bounded by `limit` per call; returns the ones re-armed."""
    now = timezone.now()
    lost = InventoryLog.objects.filter(status=InventoryLog.Status.PENDING, operation__in=GIVE_OPERATIONS,
                                       created_at__lte=now - older_than).values("op_id")
    # The limit counts the rows due now, so gives backing off never crowd out the others.
    due = (OutboxMessage.objects.filter(op_id__in=lost, sent_at__isnull=False)
           .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now)).order_by("pk"))
    rearmed: list[str] = []
    by_attempts: dict[int, list[int]] = {}
    for pk, op_id, attempts in due.values_list("pk", "op_id", "attempts")[:limit]:
        by_attempts.setdefault(attempts, []).append(pk)
        rearmed.append(op_id)
    for attempts, pks in by_attempts.items():  # one UPDATE per distinct count (a handful)
        OutboxMessage.objects.filter(pk__in=pks, sent_at__isnull=False).update(
            sent_at=None, next_attempt_at=now + give_retry_delay(attempts=attempts + 1))
    return rearmed


class GiveDeferred(Exception):
    """Redis has no snapshot of the SKU right now: the give waits (the snapshot
    being loaded may not count it)."""


def stock_gives_apply(*, gives: Sequence[dict], wait_s: float = 5.0) -> dict[str, int]:
    """Apply a list of gives (one message of the relay), each the Redis half of
    its give, then its log row becomes success. Idempotent: those already done
    are skipped with one read, and a copy of a give already marked success is
    dropped (the snapshot of a rebuilt Redis counts it, so its applied marker
    may be gone); the log rows are marked with one update. A give that finds
    no snapshot is neither applied nor marked: it waits up to `wait_s` for the
    snapshot, and is then left pending for the resend sweep (never dropped).
    Returns counts by outcome; raises GiveDeferred (after applying what it
    could) when a SKU has no snapshot."""
    ops = [g["op_id"] for g in gives]
    done = {op for op, st in InventoryLog.objects.filter(op_id__in=ops, operation__in=GIVE_OPERATIONS)
            .values_list("op_id", "status") if st == InventoryLog.Status.SUCCESS}
    counts = {"already": len(done), "applied": 0, "deferred": 0, "retired": 0}
    finished: list[str] = []
    deadline = time.monotonic() + wait_s
    waiting = [g for g in gives if g["op_id"] not in done]
    first = True
    refused: list[dict] = []
    while waiting:
        later = []
        for g in waiting:
            try:
                outcome = gate.give(sku_id=g["sku_id"], op_id=g["op_id"], quantity=int(g["quantity"]),
                                    user_id=g.get("user_id"), total_delta=int(g.get("total_delta", 0)),
                                    frozen_delta=int(g.get("frozen_delta", 0)))
            except ResponseError as exc:
                # Redis refused this SKU's script (an id made before the alphabet,
                # CROSSSLOT on a cluster): the other SKUs' gives go on; this one
                # stays pending for the resend sweep, and the log names it.
                logger.error("give %s of %s refused by Redis: %r", g["op_id"], g["sku_id"], exc)
                refused.append(g)
                continue
            if outcome is redis_keys.Give.NOT_WARM:
                later.append(g)
            else:
                finished.append(g["op_id"])
                counts["applied" if outcome is redis_keys.Give.APPLIED else "already"] += 1
        if later and first:
            settled = gives_settle_retired(sku_ids=[g["sku_id"] for g in later], op_ids=[g["op_id"] for g in later])
            counts["retired"] = len(settled)
            later = [g for g in later if g["op_id"] not in settled]
        first = False
        waiting = later
        if waiting and time.monotonic() < deadline:
            time.sleep(0.2)
        elif waiting:
            counts["deferred"] = len(waiting)
            break
    if finished:
        # By operation id only (its index): "pending" would steer MySQL to the
        # status index, which every unpaid sale row fills during a sale.
        InventoryLog.objects.filter(op_id__in=finished, operation__in=GIVE_OPERATIONS).update(
            status=InventoryLog.Status.SUCCESS, updated_at=timezone.now())
    if waiting or refused:
        raise GiveDeferred(f"{len(waiting)} give(s) found no snapshot, {len(refused)} refused by Redis")
    return counts


def gives_settle_retired(*, sku_ids: Sequence[str], op_ids: Sequence[str]) -> set[str]:
    """Gives of SKUs whose Redis keys retention dropped are done in MySQL alone:
    their log rows become success, and no message is sent for them again.

    Safe because the mark (`Sku.redis_dropped_at`) is read under the SKU row
    lock, which every snapshot load takes to bump the epoch and clear the mark:
    while it stands no snapshot was loaded since the drop, so Redis has none to
    apply the give to, and the next load reads MySQL's buckets, which already
    hold the give (MySQL first), without listing it as pending. A give whose
    SKU was loaded first finds that snapshot and is applied (or is counted by
    it already). Returns the op ids settled here."""
    with transaction.atomic():
        locked = skus_lock(sku_ids=sku_ids)
        retired = [sku_id for sku_id, sku in locked.items() if sku.redis_dropped_at is not None]
        if not retired:
            return set()
        ops = set(InventoryLog.objects.filter(op_id__in=list(op_ids), sku_id__in=retired, operation__in=GIVE_OPERATIONS,
                                              status=InventoryLog.Status.PENDING).values_list("op_id", flat=True))
        if ops:
            InventoryLog.objects.filter(op_id__in=list(ops), operation__in=GIVE_OPERATIONS).update(
                status=InventoryLog.Status.SUCCESS, updated_at=timezone.now())
    if ops:
        logger.info("%d give(s) of retired SKU(s) %s done in MySQL alone", len(ops), retired[:10])
    return ops
