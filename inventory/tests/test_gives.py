"""Gives reach Redis once, even across a snapshot rebuilt from MySQL."""
from __future__ import annotations

import pytest

from core.redis.connection import redis
from inventory.models import OutboxMessage
from inventory.redis import keys as redis_keys, live as redis_live, snapshots as redis_snapshots
from inventory.services import gives, stock
from testsupport.purchase import rebuild_lost

pytestmark = pytest.mark.mariadb_both  # again on the Galera cluster in the cluster leg


def test_snapshot_counts_its_gives_so_a_late_redelivery_adds_nothing(make_sku, live_db):
    sku = make_sku(stock=4)
    stock.stock_restock(sku_id=sku.sku_id, quantity=3, reason="more", actor="t")
    payload = OutboxMessage.objects.get(sku_id=sku.sku_id, op_id__startswith="restock:").payload
    keys = redis_keys.sku_keys(sku.sku_id)
    redis().delete(keys.stock, keys.buyers, keys.idem, keys.applied)  # Redis lost the SKU
    rebuild_lost(sku.sku_id)
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 7  # MySQL already counts the restock
    assert gives.stock_gives_apply(gives=[payload]) == {"already": 1, "applied": 0, "deferred": 0, "retired": 0}
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 7


def test_a_give_that_finds_no_snapshot_is_retried_not_lost(make_sku, live_db):
    """The snapshot is read from MySQL before a give commits and written to
    Redis after the give's message came: the give must not be marked done
    while Redis has no snapshot, or the units are lost from Redis for good."""
    from unittest import mock

    from django.db import transaction

    from inventory import selectors
    from inventory.models import InventoryLog
    from inventory.services.locks import skus_lock
    from inventory.services.snapshots import Holdings

    sku = make_sku(stock=4)
    keys = redis_keys.sku_keys(sku.sku_id)
    redis().delete(keys.stock)  # Redis lost the SKU; a warm-up starts
    with transaction.atomic():
        snap = selectors.sku_snapshot(sku=skus_lock(sku_ids=[sku.sku_id])[sku.sku_id], holdings=Holdings(), epoch=2)
    with mock.patch("inventory.messages.celery_sends.publish_gives"):  # the give's message is handled below, by hand
        op_id = stock.stock_restock(sku_id=sku.sku_id, quantity=3, reason="more", actor="t")
    give = OutboxMessage.objects.get(op_id=op_id).payload
    with pytest.raises(gives.GiveDeferred):
        gives.stock_gives_apply(gives=[give], wait_s=0)
    assert InventoryLog.objects.get(op_id=op_id).status == "pending"
    assert redis_snapshots.snapshot_load(sku_id=sku.sku_id, snapshot=snap)  # the warm-up finishes
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 4
    # the give comes again (task retry or the resend sweep) and is applied now
    assert gives.stock_gives_apply(gives=[give]) == {"already": 0, "applied": 1, "deferred": 0, "retired": 0}
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 7
    assert InventoryLog.objects.get(op_id=op_id).status == "success"


def test_lost_gives_are_marked_for_sending_again(make_sku, live_db):
    from datetime import timedelta

    from django.utils import timezone

    from inventory.models import InventoryLog

    sku = make_sku(stock=2)
    with __import__("unittest").mock.patch("inventory.messages.celery_sends.publish_gives"):
        op_id = stock.stock_restock(sku_id=sku.sku_id, quantity=1, reason="more", actor="t")
    assert OutboxMessage.objects.get(op_id=op_id).sent_at is not None  # "sent", but lost on the way
    InventoryLog.objects.filter(op_id=op_id).update(created_at=timezone.now() - timedelta(minutes=5))
    assert op_id in gives.gives_resend_lost()
    assert OutboxMessage.objects.get(op_id=op_id).sent_at is None


def test_give_retry_delay_doubles_up_to_its_cap(settings):
    settings.SECKILL_GIVE_RETRY_BASE_SECONDS, settings.SECKILL_GIVE_RETRY_CAP_SECONDS = 60, 3600
    from datetime import timedelta

    assert [gives.give_retry_delay(attempts=n).total_seconds() for n in (1, 2, 3, 4)] == [60, 120, 240, 480]
    assert gives.give_retry_delay(attempts=50) == timedelta(seconds=3600)


def test_a_give_that_meets_no_snapshot_backs_off(make_sku, live_db):
    """A give whose SKU Redis lost (nobody warms it) stays pending: it used to
    be armed again by every resend sweep, for ever; now each resend waits
    longer (base * 2^attempts, capped)."""
    from datetime import timedelta
    from unittest import mock

    from django.utils import timezone

    from inventory.models import InventoryLog

    sku = make_sku(stock=2)
    with mock.patch("inventory.messages.celery_sends.publish_gives", side_effect=ConnectionError("broker away")):
        op_id = stock.stock_restock(sku_id=sku.sku_id, quantity=1, reason="more", actor="t")
    redis().delete(redis_keys.sku_keys(sku.sku_id).stock)  # Redis lost the SKU
    assert gives.outbox_relay(op_ids=[op_id]) == 1  # sent once; nobody applies it
    with pytest.raises(gives.GiveDeferred):
        gives.stock_gives_apply(gives=[OutboxMessage.objects.get(op_id=op_id).payload], wait_s=0)
    InventoryLog.objects.filter(op_id=op_id).update(created_at=timezone.now() - timedelta(minutes=5))

    sent_times = OutboxMessage.objects.get(op_id=op_id).attempts
    assert op_id in gives.gives_resend_lost()
    row = OutboxMessage.objects.get(op_id=op_id)
    assert row.sent_at is None
    first_wait = (row.next_attempt_at - timezone.now()).total_seconds()
    expected = gives.give_retry_delay(attempts=sent_times + 1).total_seconds()
    assert expected - 5 < first_wait <= expected
    assert gives.outbox_relay(op_ids=[op_id]) == 1
    assert op_id not in gives.gives_resend_lost()  # not again before its time
    assert OutboxMessage.objects.get(op_id=op_id).sent_at is not None
    # Its time came (the row's own timestamp moved back): armed again, waiting twice as long next.
    OutboxMessage.objects.filter(op_id=op_id).update(next_attempt_at=timezone.now() - timedelta(seconds=1))
    assert op_id in gives.gives_resend_lost()
    row = OutboxMessage.objects.get(op_id=op_id)
    assert (row.next_attempt_at - timezone.now()).total_seconds() > 2 * first_wait - 5
    assert InventoryLog.objects.get(op_id=op_id).status == InventoryLog.Status.PENDING  # never dropped


def test_a_give_redis_refuses_leaves_the_other_skus_gives_applied(make_sku, live_db, monkeypatch):
    """One SKU's give script refused (an id made before the alphabet is
    CROSSSLOT on a cluster; played here by refusing that SKU's call): the
    batch's other gives are applied and marked done, the refused one stays
    pending for the resend sweep."""
    from unittest import mock

    from redis.exceptions import ResponseError

    from inventory.models import InventoryLog
    from inventory.redis import gate

    good, bad = make_sku(stock=2), make_sku(stock=2)
    with mock.patch("inventory.messages.celery_sends.publish_gives"):  # the message is handled below, by hand
        ops = {s.sku_id: stock.stock_restock(sku_id=s.sku_id, quantity=3, reason="more", actor="t")
               for s in (bad, good)}
    real = gate.give

    def give(**kw):
        if kw["sku_id"] == bad.sku_id:
            raise ResponseError("CROSSSLOT Keys in request don't hash to the same slot")
        return real(**kw)

    monkeypatch.setattr(gate, "give", give)
    batch = [{"sku_id": sku_id, "op_id": op, "quantity": 3, "user_id": None, "total_delta": 3}
             for sku_id, op in ops.items()]  # the refused SKU first
    with pytest.raises(gives.GiveDeferred):
        gives.stock_gives_apply(gives=batch, wait_s=0)
    assert redis_live.live_stock(sku_id=good.sku_id).available == 5
    assert dict(InventoryLog.objects.filter(op_id__in=ops.values()).values_list("sku_id", "status")) == {
        good.sku_id: "success", bad.sku_id: "pending"}
