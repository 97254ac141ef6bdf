"""Dead letters: what RabbitMQ dead-letters reaches the table; ops replay one
through the consumer (never selling a unit twice) or discard it with a reason;
both audited, both once. Real servers and a real worker."""
from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client

from core.redis.connection import redis
from inventory.messages import encoding, names
from inventory.models import DeadLetter, InventoryLog
from inventory.redis import gate, keys as redis_keys, live as redis_live
from inventory.services.dead_letters import (
    DeadLetterClosed,
    DeadLetterNotReplayable,
    DeadLetterReasonRequired,
    dead_letter_discard,
    dead_letter_record,
    dead_letter_replay,
    dead_letters_collect,
)
from orders.models import Order
from testsupport import wait_until
from testsupport.factories import unique
from testsupport.purchase import publish, reserve_direct
from testsupport.stores import assert_balanced, confirmed, settled


def confirm_dead_letter(r) -> DeadLetter:
    """As `_decide_splitting` leaves a reservation whose confirm kept failing:
    its unit given back to Redis (settled there), its fields in a dead letter."""
    gate.settle(sku_id=r.sku_id, confirmed=[], returned=[r.order_id])
    return dead_letter_record(task_name=names.CONFIRM_KIND, payload={
        "order_id": r.order_id, "sku_id": r.sku_id, "user_id": r.user_id, "quantity": r.quantity,
        "idempotency_key": r.idempotency_key, "reserved_ms": r.reserved_ms, "epoch": r.epoch},
        reason="OperationalError: simulated")


def forget_settlement(r) -> None:
    """Redis lost its markers (their lifetime passed, or its data)."""
    redis().zrem(redis_keys.sku_keys(r.sku_id).done, r.order_id)


def sale_rows(order_id: str) -> list[tuple[str, str]]:
    return list(InventoryLog.objects.filter(order_id=order_id, operation=InventoryLog.Operation.DECR)
                .values_list("status", "reason"))


def set_aside(r, marker: str) -> DeadLetter:
    """The dead letter of `r`, replayed while Redis still marks its unit given
    back ("kept"), or after that marker's lifetime ("expired": its entry gone,
    as the lifetime leaves it)."""
    letter = confirm_dead_letter(r)
    assert gate.is_settled(sku_id=r.sku_id, order_id=r.order_id)
    if marker == "expired":
        forget_settlement(r)
    return letter


@pytest.mark.parametrize("marker", ["kept", "expired"])
def test_a_replay_takes_the_unit_again_and_makes_the_order_whenever_it_happens(worker, make_sku, make_buyers,
                                                                                 marker):
    sku = make_sku(stock=5)
    (buyer, _), = make_buyers(1)
    r = reserve_direct(sku.sku_id, buyer.pk)
    letter = set_aside(r, marker)
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 5  # the unit is back on sale

    outcome = dead_letter_replay(dead_letter_id=letter.pk, actor="admin:test")
    assert outcome.published == [r.order_id] and not outcome.refused
    confirmed(r.order_id)
    settled(sku.sku_id)
    assert Order.objects.get(pk=r.order_id).status == Order.Status.PENDING_PAYMENT  # the promise kept
    sku = assert_balanced(sku.sku_id)  # Redis took the unit first, MySQL second: 4 and 4
    assert (sku.available_stock, sku.locked_stock) == (4, 1)
    letter.refresh_from_db()
    assert (letter.status, letter.resolved_by) == (DeadLetter.Status.REPLAYED, "admin:test")
    assert letter.resolved_at is not None and r.order_id in letter.resolution_note

    with pytest.raises(DeadLetterClosed):
        dead_letter_replay(dead_letter_id=letter.pk, actor="admin:other")
    letter.refresh_from_db()
    assert letter.resolved_by == "admin:test"
    publish(r)  # and a copy of the message is the same order again: the unit is taken once
    settled(sku.sku_id)
    assert Order.objects.filter(user=buyer).count() == 1
    assert assert_balanced(sku.sku_id).available_stock == 4


@pytest.mark.parametrize("marker", ["kept", "expired"])
def test_a_unit_sold_to_someone_else_meanwhile_is_a_logged_refusal_whenever_replayed(worker, make_sku,
                                                                                       make_buyers, marker):
    sku = make_sku(stock=1)
    (first, _), (second, _) = make_buyers(2)
    r = reserve_direct(sku.sku_id, first.pk)
    letter = set_aside(r, marker)
    other = reserve_direct(sku.sku_id, second.pk)  # the unit that came back, sold again
    publish(other)
    confirmed(other.order_id)

    outcome = dead_letter_replay(dead_letter_id=letter.pk, actor="admin:test")
    assert outcome.refused == [r.order_id] and not outcome.published
    [(status, reason)] = sale_rows(r.order_id)
    assert status == InventoryLog.Status.FAIL and "dead letter replay: sold out in Redis" in reason
    # A stray copy of the confirm changes nothing: the consumer reads the row as released.
    publish(r)
    settled(sku.sku_id)
    assert not Order.objects.filter(pk=r.order_id, status=Order.Status.PENDING_PAYMENT).exists()
    sku = assert_balanced(sku.sku_id)
    assert (sku.available_stock, sku.locked_stock) == (0, 1)


def test_a_dead_lettered_message_still_in_flight_is_confirmed(worker, make_sku, make_buyers):
    sku = make_sku(stock=3)
    (buyer, _), = make_buyers(1)
    r = reserve_direct(sku.sku_id, buyer.pk)  # taken in Redis; its message went to the dead-letter queue
    body, headers = encoding.confirm_encode([r])
    letter = dead_letter_record(task_name=names.CONFIRM_KIND, payload={"body": body.decode(), "headers": headers},
                                reason="dead-lettered by RabbitMQ: delivery_limit")
    assert dead_letter_replay(dead_letter_id=letter.pk, actor="admin:test").published == [r.order_id]
    confirmed(r.order_id)
    settled(sku.sku_id)
    assert assert_balanced(sku.sku_id).available_stock == 2


def test_a_refused_message_is_not_replayable_and_stays_open(live_db):
    letter = dead_letter_record(task_name=names.CONFIRM_KIND, payload={"body": '{"v":1,"r":[]}'},
                                reason="refused: unsigned message")
    with pytest.raises(DeadLetterNotReplayable):
        dead_letter_replay(dead_letter_id=letter.pk, actor="admin:test")
    letter.refresh_from_db()
    assert letter.status == DeadLetter.Status.OPEN


def test_discard_needs_a_reason_and_happens_once(live_db):
    letter = dead_letter_record(task_name=names.CONFIRM_KIND, payload={"body": "x"}, reason="refused: junk")
    with pytest.raises(DeadLetterReasonRequired):
        dead_letter_discard(dead_letter_id=letter.pk, actor="admin:test", reason="  ")
    dead_letter_discard(dead_letter_id=letter.pk, actor="admin:test", reason="junk from a test client")
    with pytest.raises(DeadLetterClosed):
        dead_letter_discard(dead_letter_id=letter.pk, actor="admin:test", reason="again")
    letter.refresh_from_db()
    assert (letter.status, letter.resolution_note) == (DeadLetter.Status.DISCARDED, "junk from a test client")


def ops_client() -> tuple[object, Client]:
    user = get_user_model().objects.create_user(username=unique("ops"), password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name="ops"))
    client = Client()
    client.force_login(user)
    return user, client


def test_admin_discard_asks_a_reason_and_is_audited(live_db):
    user, client = ops_client()
    letter = dead_letter_record(task_name=names.CONFIRM_KIND, payload={"body": "x"}, reason="refused: junk")
    url = "/admin/inventory/deadletter/"
    chosen = {"action": "discard", "_selected_action": [letter.pk]}

    page = client.post(url, chosen)
    assert page.status_code == 200 and b'name="reason"' in page.content
    page = client.post(url, {**chosen, "apply": "1", "reason": ""})  # required
    assert page.status_code == 200 and b"errorlist" in page.content
    letter.refresh_from_db()
    assert letter.status == DeadLetter.Status.OPEN

    done = client.post(url, {**chosen, "apply": "1", "reason": "a test message, nothing to sell"})
    assert done.status_code == 302
    letter.refresh_from_db()
    assert (letter.status, letter.resolved_by) == (DeadLetter.Status.DISCARDED, f"admin:{user.username}")
    entries = LogEntry.objects.filter(object_id=str(letter.pk), user=user, content_type__model="deadletter")
    assert [e.change_message for e in entries] == ["discarded: a test message, nothing to sell"]

    client.post(url, {**chosen, "apply": "1", "reason": "twice"}, follow=True)
    letter.refresh_from_db()
    assert letter.resolution_note == "a test message, nothing to sell"
    assert entries.count() == 1


def test_admin_replay_is_audited_and_refused_the_second_time(worker, make_sku, make_buyers):
    user, client = ops_client()
    sku = make_sku(stock=2)
    (buyer, _), = make_buyers(1)
    r = reserve_direct(sku.sku_id, buyer.pk)
    letter = confirm_dead_letter(r)
    forget_settlement(r)
    url = "/admin/inventory/deadletter/"
    chosen = {"action": "replay", "_selected_action": [letter.pk]}
    assert client.post(url, chosen).status_code == 302
    confirmed(r.order_id)
    page = client.post(url, chosen, follow=True)
    assert "already" in page.content.decode()
    entries = LogEntry.objects.filter(object_id=str(letter.pk), user=user, content_type__model="deadletter")
    assert entries.count() == 1 and entries[0].change_message.startswith("replayed:")
    settled(sku.sku_id)
    assert assert_balanced(sku.sku_id).available_stock == 1


def test_support_cannot_replay(live_db):
    user = get_user_model().objects.create_user(username=unique("support"), password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name="support"))
    client = Client()
    client.force_login(user)
    letter = dead_letter_record(task_name=names.CONFIRM_KIND, payload={"body": "x"}, reason="refused: junk")
    client.post("/admin/inventory/deadletter/", {"action": "discard", "_selected_action": [letter.pk],
                                                  "apply": "1", "reason": "no"})
    letter.refresh_from_db()
    assert letter.status == DeadLetter.Status.OPEN


def gives_dead_letter(payloads: list[dict], *, signature: str | None = None) -> DeadLetter:
    """A gives task as `dead_letters_collect` stores it (Celery's JSON body: args, kwargs, embed)."""
    from inventory import signing

    body = {"gives": payloads}
    return dead_letter_record(task_name=names.GIVES_TASK,
                              payload={"body": [[body, signature or signing.sign(body)], {}, {}], "id": "t"},
                              reason="dead-lettered by RabbitMQ: delivery_limit")


def test_a_give_task_replayed_reaches_redis_once(worker, make_sku):
    from unittest import mock

    from inventory.models import OutboxMessage
    from inventory.services import stock
    from testsupport import wait_until

    sku = make_sku(stock=2)
    with mock.patch("inventory.messages.celery_sends.publish_gives"):  # the give's message is lost on the way
        op_id = stock.stock_restock(sku_id=sku.sku_id, quantity=3, reason="more", actor="t")
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 2
    letter = gives_dead_letter([OutboxMessage.objects.get(op_id=op_id).payload])
    assert dead_letter_replay(dead_letter_id=letter.pk, actor="admin:test").gives == 1
    wait_until(lambda: InventoryLog.objects.get(op_id=op_id).status == InventoryLog.Status.SUCCESS,
               what="give applied")
    with pytest.raises(DeadLetterClosed):
        dead_letter_replay(dead_letter_id=letter.pk, actor="admin:test")
    assert assert_balanced(sku.sku_id).available_stock == 5


def test_a_give_task_with_a_bad_signature_is_not_replayed(live_db):
    letter = gives_dead_letter([{"sku_id": "x", "op_id": "y", "quantity": 999}], signature="0" * 64)
    with pytest.raises(DeadLetterNotReplayable):
        dead_letter_replay(dead_letter_id=letter.pk, actor="admin:test")
    letter.refresh_from_db()
    assert letter.status == DeadLetter.Status.OPEN


def _give_letter(task_name: str, shape: str, give: dict) -> DeadLetter:
    """A give letter as each writer stores it: RabbitMQ's (the Celery body under
    `body`) or the task's own refusal (its arguments under `args`)."""
    from inventory import signing

    data = give if names.dead_letter_kind(task_name) == names.GIVE_TASK else {"gives": [give]}
    args = [data, signing.sign(data)]
    payload = {"body": [args, {}, {}], "id": "t"} if shape == "body" else {"args": args}
    return dead_letter_record(task_name=task_name, payload=payload, reason="refused: test")


@pytest.mark.parametrize(("task_name", "shape"), [
    (names.GIVE_TASK, "body"), (names.GIVES_TASK, "body"),  # dead-lettered by RabbitMQ
    (names.GIVE_TASK, "args"), (names.GIVES_TASK, "args"),  # refused by the task itself
    ("stock_give", "args"), ("stock_gives", "args"),              # the refusals' spelling before issue 18
])
def test_a_give_letter_of_every_stored_spelling_replays(worker, make_sku, task_name, shape):
    from unittest import mock

    from inventory.models import OutboxMessage
    from inventory.services import stock
    from testsupport import wait_until

    sku = make_sku(stock=2)
    with mock.patch("inventory.messages.celery_sends.publish_gives"):  # the give's message is lost on the way
        op_id = stock.stock_restock(sku_id=sku.sku_id, quantity=3, reason="more", actor="t")
    letter = _give_letter(task_name, shape, OutboxMessage.objects.get(op_id=op_id).payload)
    assert dead_letter_replay(dead_letter_id=letter.pk, actor="admin:test").gives == 1
    wait_until(lambda: InventoryLog.objects.get(op_id=op_id).status == InventoryLog.Status.SUCCESS,
               what="give applied")
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 5


def test_a_fence_letter_is_not_replayed_and_says_why(live_db):
    letter = dead_letter_record(task_name=names.FENCE_KIND, payload={"body": '{"v":1,"f":[]}'},
                                reason="dead-lettered by RabbitMQ: delivery_limit")
    with pytest.raises(DeadLetterNotReplayable, match="fence"):
        dead_letter_replay(dead_letter_id=letter.pk, actor="admin:test")
    letter.refresh_from_db()
    assert letter.status == DeadLetter.Status.OPEN


def test_the_migration_gives_old_spellings_their_task_names(live_db):
    import importlib

    from django.apps import apps

    migration = importlib.import_module("inventory.migrations.0011_model_names_and_dead_letter_kinds")
    old = [dead_letter_record(task_name=name, payload={"args": []}, reason="refused: test")
           for name in ("stock_give", "stock_gives", names.CONFIRM_KIND)]
    migration.dead_letter_kinds_normalise(apps, None)
    assert [DeadLetter.objects.get(pk=d.pk).task_name for d in old] == [
        names.GIVE_TASK, names.GIVES_TASK, names.CONFIRM_KIND]


def test_what_rabbitmq_dead_letters_reaches_the_table(live_db):
    from seckill_site.celery import app

    with app.connection_for_write() as conn:
        producer = conn.Producer()
        dead = settings.CELERY_DEAD_LETTER
        producer.publish({"poison": True}, exchange=dead.exchange, routing_key=dead.routing_key,
                         declare=[dead], headers={"task": names.GIVE_TASK},
                         serializer="json")
    before = DeadLetter.objects.count()
    wait_until(lambda: dead_letters_collect() or DeadLetter.objects.count() > before,
               what="dead letter collected")
    letter = DeadLetter.objects.latest("created_at")
    assert letter.task_name == names.GIVE_TASK
    assert letter.payload["body"] == {"poison": True}
