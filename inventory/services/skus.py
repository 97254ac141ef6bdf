"""SKUs and their Redis snapshots: create, edit sale data, warm, rebuild."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Callable

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from inventory import redis_store, selectors
from core.errors import SkuNotFound, StockActionRefused
from inventory.models import InventoryLog, Sku
from inventory.services.locks import skus_lock

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Holdings:
    """What the orders of a SKU hold, for its snapshot: units per buyer (the
    per-user limit) and the idempotency records still within their lifetime."""

    buyers: dict[int, int] = field(default_factory=dict)
    idempotency: dict[str, tuple[str, int]] = field(default_factory=dict)


HoldingsSource = Callable[[str], Holdings]
_holdings_source: HoldingsSource = lambda sku_id: Holdings()  # noqa: E731  (replaced by orders)


def holdings_source_register(source: HoldingsSource) -> None:
    """Orders (above inventory) tells inventory how to read what orders hold."""
    global _holdings_source
    _holdings_source = source


def sku_create(
    *,
    sku_id: str,
    stock: int,
    name: str = "",
    per_user_limit: int = 1,
    price: Decimal | int | str = 0,
    starts_at: datetime | None = None,
    ends_at: datetime | None = None,
    status: str = Sku.Status.ACTIVE,
    actor: str = "",
) -> Sku:
    """Create a SKU on sale (from now unless told otherwise) and warm its
    snapshot once the row is committed (callers may hold a transaction)."""
    now = timezone.now()
    try:  # before the row exists: a request between commit and warm-up must find it
        redis_store.sku_registry_add(sku_id=sku_id)
    except redis_store.RedisError:
        pass  # the registry is read again from MySQL within a minute
    with transaction.atomic():
        sku = Sku.objects.create(
            sku_id=sku_id, name=name or sku_id, price=Decimal(str(price)), total_stock=stock,
            available_stock=stock, per_user_limit=per_user_limit, sale_starts_at=starts_at or now,
            sale_ends_at=ends_at, status=status, status_changed_at=now,
        )
        if stock:
            InventoryLog.objects.create(
                sku=sku, operation=InventoryLog.Operation.RESTOCK, quantity=stock,
                status=InventoryLog.Status.SUCCESS, reason="initial stock", actor=actor,
            )
        transaction.on_commit(lambda: (redis_store.clear_missing(sku_id=sku_id), stock_warm(sku_id=sku_id)))
    return sku


SALE_FIELDS = ("name", "price", "per_user_limit", "sale_starts_at", "sale_ends_at", "status")


def sku_update(*, sku_id: str, actor: str, **changes) -> Sku:
    """Edit a SKU's sale data (never its stock). The version goes up, and once
    committed Redis gets the new sale data, newest version first."""
    unknown = set(changes) - set(SALE_FIELDS)
    if unknown:
        raise ValueError(f"not sale data: {sorted(unknown)}")
    with transaction.atomic():
        sku = skus_lock(sku_ids=[sku_id]).get(sku_id)
        if sku is None:
            raise SkuNotFound(sku_id=sku_id)
        if "status" in changes and changes["status"] != sku.status:
            sku.status_changed_at = timezone.now()
        for name, value in changes.items():
            setattr(sku, name, value)
        sku.version = F("version") + 1
        sku.save(update_fields=[*changes, "status_changed_at", "version", "updated_at"])
        sku.refresh_from_db(fields=["version"])
        transaction.on_commit(lambda: sku_sale_data_push(sku=sku))
    logger.info("sale data of %s changed by %s: %s", sku_id, actor, sorted(changes))
    return sku


def sku_sale_data_push(*, sku: Sku) -> None:
    """Send a SKU's sale data to Redis (newest version wins there)."""
    try:
        redis_store.meta_update(
            sku_id=sku.sku_id, per_user_limit=sku.per_user_limit, starts_ms=selectors.epoch_ms(sku.sale_starts_at),
            ends_ms=selectors.epoch_ms(sku.sale_ends_at), status=sku.status, version=sku.version)
    except redis_store.RedisError as exc:
        # Redis keeps the older sale data until reconciliation pushes it again;
        # meanwhile the confirm refuses what a paused or ended SKU accepted.
        logger.warning("sale data of %s not pushed to Redis: %r", sku.sku_id, exc)


def stock_warm(*, sku_id: str) -> bool:
    """Load the SKU's snapshot into Redis if it is absent. False if MySQL has no such SKU.

    Under a short lock so two processes never load twice; the load itself
    refuses to overwrite a snapshot that appeared meanwhile.
    """
    if redis_store.snapshot_exists(sku_id=sku_id):
        return True
    if not sku_known(sku_id=sku_id):
        return False
    token = redis_store.warm_lock_acquire(sku_id=sku_id)
    if token is None:
        if redis_store.wait_for_snapshot(sku_id=sku_id):
            return True
        return selectors.sku_get(sku_id=sku_id) is not None and stock_warm(sku_id=sku_id)
    try:
        with transaction.atomic():
            # The row lock makes the snapshot consistent with the gives and
            # freezes it counts: none can commit while it is read.
            sku = skus_lock(sku_ids=[sku_id]).get(sku_id)
            snapshot = selectors.sku_snapshot(sku=sku, holdings=_holdings_source(sku_id)) if sku else None
        if sku is None:
            redis_store.mark_missing(sku_id=sku_id)
            return False
        if redis_store.snapshot_load(sku_id=sku_id, snapshot=snapshot):
            logger.info("warmed %s: available=%s", sku_id, snapshot.available)
        return True
    finally:
        redis_store.warm_lock_release(sku_id=sku_id, token=token)


def sku_known(*, sku_id: str) -> bool:
    """Does MySQL have this SKU? Answered from Redis's registry of SKU ids, read
    again from MySQL (all ids, one query) when it is not known to be complete,
    so requests for made-up SKU ids cost MySQL nothing."""
    known = redis_store.sku_registry_check(sku_id=sku_id)
    if known is None:
        redis_store.sku_registry_fill(sku_ids=list(Sku.objects.values_list("sku_id", flat=True)))
        known = redis_store.sku_registry_check(sku_id=sku_id)
    return bool(known)


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
