"""Retention of inventory's own state: old rows nothing depends on, and the
Redis keys of SKUs whose sale ended (docs/architecture.md, "Bounded data").

Kept for good: SKU rows and the inventory log (every stock operation, undo
records and freeze intents included): they are the audit trail. Deleted once
older than the retention: outbox rows whose give is done (its log row
`success`) and dead letters ops resolved. Every delete goes by primary key in
chunks, so no statement holds many row locks for long.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from core.redis.errors import RedisError
from inventory import selectors
from inventory.models import GIVE_OPERATIONS, DeadLetter, InventoryLog, OutboxMessage, Sku
from inventory.redis import keys as redis_keys, snapshots as redis_snapshots
from inventory.services.locks import skus_lock
from inventory.services.registry import sku_registry_rebuild

logger = logging.getLogger(__name__)

# Rows per DELETE, and rows per table per sweep (the rest waits for the next).
RETENTION_CHUNK = 1000
RETENTION_CAP = 100_000
# SKUs whose Redis keys one sweep may drop.
RETIRE_CAP = 500


def rows_delete_chunked(*, rows: models.QuerySet, keep: Callable[[list], set] | None = None,
                        chunk: int = RETENTION_CHUNK, cap: int = RETENTION_CAP) -> int:
    """Delete the rows of `rows` in primary-key order, `chunk` at a time, at
    most `cap`; `keep(pks)` names the pks of a chunk that must stay. The scan
    moves on by primary key, so rows kept are not read again in this sweep.
    Returns how many were deleted."""
    deleted, after = 0, None
    while deleted < cap:
        page = rows if after is None else rows.filter(pk__gt=after)
        pks = list(page.order_by("pk").values_list("pk", flat=True)[:chunk])
        if not pks:
            break
        after = pks[-1]
        kept = keep(pks) if keep else set()
        doomed = [pk for pk in pks if pk not in kept][:cap - deleted]
        if doomed:
            _total, by_model = rows.model.objects.filter(pk__in=doomed).delete()
            deleted += by_model.get(rows.model._meta.label, 0)
    return deleted


def outbox_rows_purge(*, before: datetime, chunk: int = RETENTION_CHUNK, cap: int = RETENTION_CAP) -> int:
    """Outbox rows older than `before` whose give is done (log row `success`).
    A row whose give is still pending stays: the resend sweep arms it again and
    snapshots read its quantity."""
    def pending(pks: list[int]) -> set[int]:
        ops = dict(OutboxMessage.objects.filter(pk__in=pks).values_list("op_id", "pk"))
        done = set(InventoryLog.objects.filter(op_id__in=list(ops), operation__in=GIVE_OPERATIONS,
                                               status=InventoryLog.Status.SUCCESS).values_list("op_id", flat=True))
        return {pk for op, pk in ops.items() if op not in done}

    rows = OutboxMessage.objects.filter(created_at__lt=before, sent_at__isnull=False)
    return rows_delete_chunked(rows=rows, keep=pending, chunk=chunk, cap=cap)


def dead_letters_resolved(*, before: datetime) -> models.QuerySet:
    """Dead letters ops resolved (replayed or discarded) before `before`; open ones stay."""
    return DeadLetter.objects.exclude(status=DeadLetter.Status.OPEN).filter(resolved_at__lt=before)


def dead_letters_purge(*, before: datetime, chunk: int = RETENTION_CHUNK, cap: int = RETENTION_CAP) -> int:
    """Delete resolved dead letters older than `before`. Their alerts go first,
    deleted by reconciliation, which owns that table (reconciliation.retention)."""
    return rows_delete_chunked(rows=dead_letters_resolved(before=before), chunk=chunk, cap=cap)


# --- Redis keys of ended SKUs ----------------------------------------------------------

@dataclass(frozen=True)
class Retired:
    dropped: list[str]
    skipped: dict[str, str]  # sku id -> why its keys stay for now


def sku_retire(*, sku_id: str, grace_s: float) -> str:
    """Drop the Redis keys of one ended SKU and mark it in MySQL; returns
    "dropped" or why not.

    The order makes a unit impossible to sell twice. Under the SKU's warm lock
    (so no snapshot load runs meanwhile), Redis drops every key in one script
    only if nothing is in flight or held, no fence stands, the gate is
    closed and the snapshot is of the epoch MySQL holds (drop_ended.lua): after
    that, every reservation that snapshot accepted is in MySQL (an order, or an
    undo record), and no new one can be taken without a load. Then MySQL
    marks the SKU under its row lock, only if its epoch is still that one
    (`redis_dropped_at`). A load clears the mark in the UPDATE that bumps the
    epoch, so the mark always means "no snapshot since the drop": a warm-up may
    load such a SKU at once instead of fencing it, and its gives are done in
    MySQL alone (gives.gives_settle_retired). If this process dies between
    the two steps, the SKU is unmarked with no snapshot: the next warm-up fences
    it, the safe path for a loss, and the next sweep drops it again.
    A give or freeze that commits after the pending check below is safe too:
    the give waits for a snapshot or settles against the mark; the freeze
    finds no snapshot and is refused.
    """
    sku = selectors.sku_get(sku_id=sku_id)
    if sku is None or sku.redis_epoch == 0 or sku.redis_dropped_at is not None:
        return "not loaded"
    if selectors.pending_gives(sku_id=sku_id) or selectors.pending_freezes(sku_id=sku_id):
        return "gives or freezes pending"
    token = redis_snapshots.warm_lock_acquire(sku_id=sku_id)
    if token is None:
        return "a warm-up is running"
    try:
        outcome = redis_snapshots.snapshot_drop_ended(sku_id=sku_id, epoch=sku.redis_epoch, lock_token=token,
                                                      grace_ms=int(grace_s * 1000))
        if outcome is not redis_keys.Drop.DROPPED:
            return outcome.name.lower()
        with transaction.atomic():
            skus_lock(sku_ids=[sku_id])
            marked = Sku.objects.filter(pk=sku_id, redis_epoch=sku.redis_epoch, redis_dropped_at__isnull=True
                                        ).update(redis_dropped_at=timezone.now())
    finally:
        redis_snapshots.warm_lock_release(sku_id=sku_id, token=token)
    if not marked:  # a load ran after all (the lock lapsed): it is a normal SKU again
        return "loaded meanwhile"
    redis_snapshots.clear_missing(sku_id=sku_id)
    return "dropped"


def skus_retire(*, grace_s: float | None = None, cap: int = RETIRE_CAP) -> Retired:
    """Drop the Redis keys of the ended SKUs past their grace with nothing in
    flight or pending (MySQL picks them by its clock, Redis checks by its own)."""
    grace = settings.SECKILL_ENDED_REDIS_GRACE_SECONDS if grace_s is None else grace_s
    dropped, skipped = [], {}
    for sku_id in selectors.sku_ids_retirable(grace_s=grace, limit=cap):
        try:
            why = sku_retire(sku_id=sku_id, grace_s=grace)
        except RedisError as exc:
            why = f"redis: {exc.__class__.__name__}"
        if why == "dropped":
            dropped.append(sku_id)
        else:
            skipped[sku_id] = why
    if dropped:
        logger.info("retention dropped the Redis keys of %d ended SKU(s): %s", len(dropped), dropped[:20])
    return Retired(dropped, skipped)


def inventory_retention_sweep(*, before: datetime, grace_s: float | None = None) -> dict[str, int]:
    """Inventory's part of the retention sweep: old outbox rows and resolved
    dead letters, the Redis keys of ended SKUs, and the SKU registry read again
    from MySQL (ids whose create rolled back leave it)."""
    retired = skus_retire(grace_s=grace_s)
    return {
        "outbox": outbox_rows_purge(before=before),
        "dead_letters": dead_letters_purge(before=before),
        "skus_retired": len(retired.dropped),
        "registry": sku_registry_rebuild(),
    }
