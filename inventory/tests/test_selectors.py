"""inventory.selectors: which SKUs the sweeps visit (ended ones until their gives are
applied) and which ones retention may retire."""
from __future__ import annotations

from datetime import timedelta
from unittest import mock

from django.utils import timezone

from inventory import selectors
from inventory.models import Sku
from inventory.services import retention, skus, stock


def test_an_ended_sku_is_swept_while_a_give_of_its_is_pending(make_sku):
    """It used to be swept only while reservations were in flight, and only
    within a week of its end: a give pending for a SKU Redis lost then waited
    for a snapshot nobody loaded."""
    pending, idle = make_sku(stock=2), make_sku(stock=2)
    with mock.patch("inventory.messages.celery_sends.publish_gives", side_effect=ConnectionError("broker away")):
        stock.stock_restock(sku_id=pending.sku_id, quantity=1, reason="more", actor="t")
    for s in (pending, idle):
        skus.sku_update(sku_id=s.sku_id, actor="t", status=Sku.Status.ENDED)
        Sku.objects.filter(pk=s.sku_id).update(status_changed_at=timezone.now() - timedelta(days=30))

    swept = selectors.sku_ids_sweepable()

    assert pending.sku_id in swept
    assert idle.sku_id not in swept


def test_a_retired_sku_is_not_swept(make_sku):
    sku = make_sku(stock=2)
    assert sku.sku_id in selectors.sku_ids_sweepable()
    skus.sku_update(sku_id=sku.sku_id, actor="t", status=Sku.Status.ENDED)
    Sku.objects.filter(pk=sku.sku_id).update(status_changed_at=timezone.now() - timedelta(days=2))
    assert sku.sku_id in retention.skus_retire(grace_s=3600).dropped
    assert sku.sku_id not in selectors.sku_ids_sweepable()
    assert sku.sku_id not in selectors.sku_ids_live()


def test_an_ended_sku_is_retirable_after_its_grace_unless_a_give_is_pending(make_sku):
    ended, pending, active = make_sku(stock=2), make_sku(stock=2), make_sku(stock=2)
    with mock.patch("inventory.messages.celery_sends.publish_gives", side_effect=ConnectionError("broker away")):
        stock.stock_restock(sku_id=pending.sku_id, quantity=1, reason="more", actor="t")
    for s in (ended, pending):
        skus.sku_update(sku_id=s.sku_id, actor="t", status=Sku.Status.ENDED)
    ids = {s.sku_id for s in (ended, pending, active)}

    # Ended just now: within the grace, nothing is retirable yet.
    assert not ids & set(selectors.sku_ids_retirable(grace_s=3600, limit=10_000))

    Sku.objects.filter(pk__in=[ended.sku_id, pending.sku_id]).update(
        status_changed_at=timezone.now() - timedelta(hours=2))
    assert ids & set(selectors.sku_ids_retirable(grace_s=3600, limit=10_000)) == {ended.sku_id}
