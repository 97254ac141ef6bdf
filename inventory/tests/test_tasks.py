"""The inventory tasks, called in-process: what a refused give leaves for ops,
the consumer of old one-give messages, and the freezes sweep apart from the
outbox relay."""
from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone

from inventory import signing
from inventory.messages import names
from inventory.models import DeadLetter, InventoryLog, OutboxMessage
from inventory.redis import live as redis_live, liveness
from inventory.services import stock
from inventory.services.dead_letters import DeadLetterNotReplayable, dead_letter_replay
from inventory.tasks import FREEZES_RESOLVE_TASK, outbox_relay_task, stock_freezes_resolve_task, stock_give_task


def test_a_give_the_task_refuses_is_kept_under_the_name_replay_reads(live_db):
    payload = {"sku_id": "x", "op_id": "forged", "quantity": 999}
    assert stock_give_task(payload, "0" * 64) == "refused"
    letter = DeadLetter.objects.get(payload__args__0__op_id="forged")
    assert letter.task_name == names.GIVE_TASK
    # Read as a give (its signature checked again), not turned away as an unknown task.
    with pytest.raises(DeadLetterNotReplayable, match="signature"):
        dead_letter_replay(dead_letter_id=letter.pk, actor="admin:test")


def test_an_old_one_give_message_is_applied_once_through_the_batch_path(make_sku, live_db):
    sku = make_sku(stock=4)
    with mock.patch("inventory.messages.celery_sends.publish_gives"):  # its message is the old one below
        op_id = stock.stock_restock(sku_id=sku.sku_id, quantity=3, reason="more", actor="t")
    payload = OutboxMessage.objects.get(op_id=op_id).payload
    assert stock_give_task(payload, signing.sign(payload)) == "applied"
    assert InventoryLog.objects.get(op_id=op_id).status == InventoryLog.Status.SUCCESS
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 7
    assert stock_give_task(payload, signing.sign(payload)) == "already"  # a second copy adds nothing
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 7


def _stale_freeze(sku_id: str) -> str:
    """A freeze whose process died after writing its intent."""
    op_id = f"freeze:test-{timezone.now().timestamp()}"
    InventoryLog.objects.create(sku_id=sku_id, operation=InventoryLog.Operation.FREEZE, quantity=1, op_id=op_id,
                                status=InventoryLog.Status.PENDING, reason="died", actor="t")
    InventoryLog.objects.filter(op_id=op_id).update(created_at=timezone.now() - timedelta(minutes=5))
    return op_id


def test_stale_freezes_are_cancelled_by_their_own_sweep_not_the_outbox_relay(make_sku, live_db):
    sku = make_sku(stock=3)
    op_id = _stale_freeze(sku.sku_id)
    assert "freezes_resolved" not in outbox_relay_task()
    assert InventoryLog.objects.get(op_id=op_id).status == InventoryLog.Status.PENDING
    assert stock_freezes_resolve_task() >= 1
    assert InventoryLog.objects.get(op_id=op_id).status == InventoryLog.Status.FAIL
    assert FREEZES_RESOLVE_TASK in liveness.sweeps_last_run()
