"""Retention of inventory's state: old outbox rows and dead letters, and the
Redis keys of ended SKUs (dropped safely, the SKU still readable and warmable)."""
from __future__ import annotations

import time
from datetime import timedelta
from unittest import mock

from django.utils import timezone

from inventory.models import DeadLetter, InventoryLog, OutboxMessage, Sku
from inventory.redis import gate, keys as redis_keys, live as redis_live, snapshots as redis_snapshots
from inventory.services import gives, retention, skus, snapshots, stock
from testsupport.factories import unique
from testsupport.purchase import reserve_direct

OLD = timedelta(days=31)


def ended_long_ago(sku_id: str) -> None:
    """Ops ended the sale (pushed to Redis), and that was a while ago: the
    row's own timestamp is moved back, nobody's clock."""
    skus.sku_update(sku_id=sku_id, actor="t", status=Sku.Status.ENDED)
    Sku.objects.filter(pk=sku_id).update(status_changed_at=timezone.now() - timedelta(days=2))


def test_an_ended_sku_loses_its_redis_keys_and_stays_readable(make_sku, make_buyers, api):
    sku = make_sku(stock=5)
    (user, token), = make_buyers(1)
    reserve_direct(sku.sku_id, user.pk)  # a reservation, so the SKU has markers and a buyer
    gate.undo(sku_id=sku.sku_id, order_id=gate.inflight_entries(sku_id=sku.sku_id)[0].order_id)
    ended_long_ago(sku.sku_id)
    assert redis_keys.sku_key_names(sku_id=sku.sku_id)  # stock, buyers, released marker ...

    assert sku.sku_id in retention.skus_retire(grace_s=3600).dropped

    assert redis_keys.sku_key_names(sku_id=sku.sku_id) == []
    row = Sku.objects.get(pk=sku.sku_id)
    assert row.redis_dropped_at is not None and row.redis_epoch == 1
    r = api(token).get(f"/api/v1/skus/{sku.sku_id}")
    assert r.status_code == 200, r.content  # not fenced: no 503
    assert r.json()["sale_state"] == "ended" and r.json()["available"] == 5
    assert redis_keys.sku_key_names(sku_id=sku.sku_id) == []  # a read loads nothing back
    assert redis_snapshots.fence_token(sku_id=sku.sku_id) is None
    assert snapshots.stock_warm(sku_id=sku.sku_id) is snapshots.Warm.RETIRED
    buy = api(token).post("/api/v1/orders", {"sku_id": sku.sku_id, "quantity": 1}, format="json",
                          HTTP_IDEMPOTENCY_KEY=unique("k"))
    assert buy.status_code == 409 and buy.json()["code"] == "sale_not_active", buy.content
    assert redis_keys.sku_key_names(sku_id=sku.sku_id) == []


def test_keys_stay_while_anything_is_in_flight_or_pending(make_sku, make_buyers):
    busy, pending, recent = make_sku(stock=3), make_sku(stock=3), make_sku(stock=3)
    (user, _t), = make_buyers(1)
    reserve_direct(busy.sku_id, user.pk)  # its confirm has not come
    with mock.patch("inventory.messages.celery_sends.publish_gives", side_effect=ConnectionError("broker away")):
        stock.stock_restock(sku_id=pending.sku_id, quantity=1, reason="more", actor="t")  # give pending
    for s in (busy, pending):
        ended_long_ago(s.sku_id)
    skus.sku_update(sku_id=recent.sku_id, actor="t", status=Sku.Status.ENDED)  # ended just now

    out = retention.skus_retire(grace_s=3600)

    assert not {busy.sku_id, pending.sku_id, recent.sku_id} & set(out.dropped)
    assert out.skipped.get(busy.sku_id) == "busy"
    for s in (busy, pending, recent):
        assert redis_snapshots.snapshot_exists(sku_id=s.sku_id), s.sku_id
        assert Sku.objects.get(pk=s.sku_id).redis_dropped_at is None


def test_a_window_that_ended_counts_by_redis_clock(make_sku):
    now = timezone.now()
    sku = make_sku(stock=2, starts_at=now - timedelta(hours=1), ends_at=now + timedelta(seconds=1))
    time.sleep(1.2)
    # MySQL (by its clock) and Redis (by its own) both see the window over.
    assert sku.sku_id in retention.skus_retire(grace_s=0).dropped
    # One whose window ended in MySQL only (the push did not reach Redis) stays:
    # Redis would still sell it, so its keys are needed.
    other = make_sku(stock=2, starts_at=now - timedelta(hours=1), ends_at=now + timedelta(hours=1))
    Sku.objects.filter(pk=other.sku_id).update(sale_ends_at=now - timedelta(minutes=30))
    out = retention.skus_retire(grace_s=60)
    assert out.skipped.get(other.sku_id) == "open"
    assert redis_snapshots.snapshot_exists(sku_id=other.sku_id)


def test_a_reopened_sku_is_loaded_at_once_and_exactly(make_sku, make_buyers):
    sku = make_sku(stock=4)
    ended_long_ago(sku.sku_id)
    assert sku.sku_id in retention.skus_retire(grace_s=3600).dropped
    # A give made while the keys are gone is done in MySQL alone, once.
    with mock.patch("inventory.messages.celery_sends.publish_gives", side_effect=ConnectionError("broker away")):
        op_id = stock.stock_restock(sku_id=sku.sku_id, quantity=3, reason="more", actor="t")
    payload = OutboxMessage.objects.get(op_id=op_id).payload
    retired = {"already": 0, "applied": 0, "deferred": 0, "retired": 1}  # in MySQL alone: no snapshot to apply it to
    assert gives.stock_gives_apply(gives=[payload], wait_s=0) == retired
    assert InventoryLog.objects.get(op_id=op_id).status == InventoryLog.Status.SUCCESS

    skus.sku_update(sku_id=sku.sku_id, actor="t", status=Sku.Status.ACTIVE)
    assert snapshots.stock_warm(sku_id=sku.sku_id) is snapshots.Warm.READY  # no fence: nothing was lost
    row = Sku.objects.get(pk=sku.sku_id)
    assert row.redis_dropped_at is None and row.redis_epoch == 2
    live = redis_live.live_stock(sku_id=sku.sku_id)
    assert (live.available, live.total) == (7, 7)
    assert gives.stock_gives_apply(gives=[payload], wait_s=0)["already"] == 1  # a late copy adds nothing
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 7
    (user, _t), = make_buyers(1)
    assert reserve_direct(sku.sku_id, user.pk).epoch == 2


def test_a_drop_and_a_load_never_overlap(make_sku):
    """The drop runs under the warm lock and checks the epoch MySQL holds: a
    snapshot loaded since (another epoch) is never dropped, and MySQL is marked
    only while its epoch is the dropped one."""
    sku = make_sku(stock=2)
    ended_long_ago(sku.sku_id)
    token = redis_snapshots.warm_lock_acquire(sku_id=sku.sku_id)  # a warm-up is running
    try:
        assert retention.skus_retire(grace_s=3600).skipped[sku.sku_id] == "a warm-up is running"
        assert redis_snapshots.snapshot_drop_ended(sku_id=sku.sku_id, epoch=1, lock_token="not-the-holder",
                                                   grace_ms=0) is redis_keys.Drop.NOT_OURS
        assert redis_snapshots.snapshot_drop_ended(sku_id=sku.sku_id, epoch=2, lock_token=token,
                                                   grace_ms=0) is redis_keys.Drop.NOT_OURS
    finally:
        redis_snapshots.warm_lock_release(sku_id=sku.sku_id, token=token)
    assert redis_snapshots.snapshot_exists(sku_id=sku.sku_id)
    assert sku.sku_id in retention.skus_retire(grace_s=3600).dropped


def test_old_outbox_rows_go_once_their_give_is_done(make_sku):
    sku = make_sku(stock=2)
    done = stock.stock_restock(sku_id=sku.sku_id, quantity=1, reason="done", actor="t")
    with mock.patch("inventory.messages.celery_sends.publish_gives", side_effect=ConnectionError("broker away")):
        pending = stock.stock_restock(sku_id=sku.sku_id, quantity=1, reason="pending", actor="t")
    gives.stock_gives_apply(gives=[OutboxMessage.objects.get(op_id=done).payload])
    OutboxMessage.objects.filter(op_id=pending).update(sent_at=timezone.now())  # sent, never applied
    fresh = stock.stock_restock(sku_id=sku.sku_id, quantity=1, reason="fresh", actor="t")
    gives.stock_gives_apply(gives=[OutboxMessage.objects.get(op_id=fresh).payload])
    OutboxMessage.objects.filter(op_id__in=[done, pending]).update(created_at=timezone.now() - OLD)
    logs = InventoryLog.objects.filter(sku_id=sku.sku_id).count()

    assert retention.outbox_rows_purge(before=timezone.now() - timedelta(days=30), chunk=1) >= 1

    left = set(OutboxMessage.objects.filter(sku_id=sku.sku_id).values_list("op_id", flat=True))
    assert left == {pending, fresh}
    assert InventoryLog.objects.filter(sku_id=sku.sku_id).count() == logs  # the audit trail stays


def test_resolved_dead_letters_go_open_ones_stay(live_db):
    from inventory.services.dead_letters import dead_letter_discard, dead_letter_record

    old_open = dead_letter_record(task_name="t", payload={"a": 1}, reason="r")
    old_done = dead_letter_record(task_name="t", payload={"a": 2}, reason="r")
    dead_letter_discard(dead_letter_id=old_done.pk, actor="ops", reason="junk")
    DeadLetter.objects.filter(pk__in=[old_open.pk, old_done.pk]).update(created_at=timezone.now() - OLD)
    DeadLetter.objects.filter(pk=old_done.pk).update(resolved_at=timezone.now() - OLD)

    assert retention.dead_letters_purge(before=timezone.now() - timedelta(days=30)) >= 1

    assert DeadLetter.objects.filter(pk=old_open.pk).exists()
    assert not DeadLetter.objects.filter(pk=old_done.pk).exists()
