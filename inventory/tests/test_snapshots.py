"""The snapshot services (inventory.services.snapshots) against the real
stores: what a snapshot needs from orders must have been registered."""
from __future__ import annotations

import pytest

from inventory.models import Sku
from inventory.redis import live as redis_live, snapshots as redis_snapshots
from inventory.services import snapshots
from testsupport.factories import unique

pytestmark = pytest.mark.redis_both


def test_a_snapshot_without_a_registered_holdings_source_is_refused_not_loaded_empty(live_db, monkeypatch):
    sku = Sku.objects.create(sku_id=unique("T"), name="never warmed", total_stock=3, available_stock=3)
    redis_snapshots.sku_registry_add(sku_id=sku.sku_id)
    monkeypatch.setattr(snapshots, "_holdings_source", snapshots._holdings_unregistered)
    with pytest.raises(RuntimeError, match="holdings_source_register"):
        snapshots.stock_warm(sku_id=sku.sku_id)
    assert redis_live.live_stock(sku_id=sku.sku_id) is None  # nothing loaded without the holdings
    sku.refresh_from_db()
    assert sku.redis_epoch == 0  # the load's epoch rolled back with it

    monkeypatch.undo()  # the source orders registered: the same warm loads
    assert snapshots.stock_warm(sku_id=sku.sku_id) is snapshots.Warm.READY
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 3


def test_the_orders_app_registers_its_holdings_source_at_start_up():
    from orders.selectors import sku_holdings

    assert snapshots._holdings_source is sku_holdings
