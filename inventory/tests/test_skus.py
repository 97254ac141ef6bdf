"""The registry of SKU ids in Redis holds only SKUs MySQL has."""
from __future__ import annotations

import pytest
from django.db import transaction

from core.redis.connection import redis
from core.redis.keys import text
from inventory.redis import keys as redis_keys, snapshots as redis_snapshots
from inventory.services import registry, skus, snapshots
from testsupport.factories import unique


def members() -> set[str]:
    return {text(m) for m in redis().smembers(redis_keys.SKU_REGISTRY)}


def test_an_id_whose_create_rolled_back_leaves_the_registry(make_sku):
    kept = make_sku(stock=1)
    gone = unique("T")
    # the create and the failure after it: one transaction
    with pytest.raises(RuntimeError, match="half-way"), transaction.atomic():  # noqa: PT012
        skus.sku_create(sku_id=gone, stock=1)
        raise RuntimeError("the import failed half-way")
    assert gone in members()  # registered before its row, so a request right after the commit finds it

    registry.sku_registry_rebuild(recent_s=0)

    assert gone not in members() and kept.sku_id in members()
    assert redis_snapshots.sku_registry_check(sku_id=gone) is False
    assert snapshots.stock_warm(sku_id=gone) is snapshots.Warm.UNKNOWN


def test_a_rebuild_keeps_an_id_registered_after_mysql_was_read(make_sku):
    """A create registers its id before its row commits: a rebuild that read
    MySQL just before must not drop it (the id counts as recent)."""
    fresh = unique("T")
    redis_snapshots.sku_registry_fill(sku_ids=[])  # as if MySQL was read before the row existed ...
    redis_snapshots.sku_registry_add(sku_id=fresh)  # ... and the create registered it meanwhile
    registry.sku_registry_rebuild()  # the default window: the id stays
    assert fresh in members()
    redis_snapshots.sku_registry_fill(sku_ids=[], recent_ms=0)
    assert fresh not in members()
