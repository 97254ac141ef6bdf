"""The registry of SKU ids MySQL has, kept in Redis so that requests for
made-up SKU ids cost MySQL nothing (`inventory.redis.snapshots` holds it)."""
from __future__ import annotations

from inventory.models import Sku
from inventory.redis import snapshots as redis_snapshots


def sku_known(*, sku_id: str) -> bool:
    """Does MySQL have this SKU? Answered from Redis's registry of SKU ids, read
    again from MySQL (all ids, one query) when it is not known to be complete,
    so requests for made-up SKU ids cost MySQL nothing."""
    known = redis_snapshots.sku_registry_check(sku_id=sku_id)
    if known is None:
        sku_registry_rebuild()
        known = redis_snapshots.sku_registry_check(sku_id=sku_id)
    return bool(known)


def sku_registry_rebuild(*, recent_s: float | None = None) -> int:
    """The registry becomes the SKU ids MySQL has (ids of creates that rolled
    back, or of SKUs gone, leave it), keeping ids registered within `recent_s`
    (default: redis_snapshots.SKU_REGISTRY_RECENT_MS), whose rows may not have been
    committed when MySQL was read. Returns its size."""
    ids = list(Sku.objects.values_list("sku_id", flat=True))
    recent_ms = redis_snapshots.SKU_REGISTRY_RECENT_MS if recent_s is None else int(recent_s * 1000)
    return redis_snapshots.sku_registry_fill(sku_ids=ids, recent_ms=recent_ms)
