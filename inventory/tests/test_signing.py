"""Signatures that come from outside (a message's header, a task's argument, a
dead letter's body) are refused as BadSignature whatever characters they
hold: a signature with non-ASCII characters is a forgery like any other, not
an error that escapes the refusal (hmac.compare_digest raises TypeError on a
str that is not ASCII)."""
from __future__ import annotations

import pytest
from django.conf import settings
from kombu import Connection, Producer

from inventory import signing
from inventory.messages import encoding, names, queues
from inventory.models import DeadLetter
from inventory.services.dead_letters import DeadLetterNotReplayable, dead_letter_replay
from inventory.tasks import stock_give_task
from testsupport import wait_until

# Each the length of a hex SHA-256, so only the characters differ from a real one.
NON_ASCII = ["é" * 64, "0" * 63 + "é", "\u4e2d" * 64, "\ud800" * 64, "0" * 63 + "\uff10"]
NON_ASCII_IDS = ["latin-1", "last-char", "cjk", "lone-surrogate", "fullwidth-digit"]


@pytest.mark.parametrize("signature", NON_ASCII, ids=NON_ASCII_IDS)
def test_a_non_ascii_signature_is_a_bad_signature(signature):
    with pytest.raises(signing.BadSignature):
        signing.verify_bytes(b'{"v":1}', signature)
    with pytest.raises(signing.BadSignature):
        signing.verify({"sku_id": "x"}, signature)


def test_non_ascii_bytes_are_a_bad_signature_and_the_real_one_still_passes():
    body = b'{"v":1}'
    with pytest.raises(signing.BadSignature):
        signing.verify_bytes(body, "é".encode() * 32)
    good = signing.sign_bytes(body)
    assert signing.verify_bytes(body, good) == body
    assert signing.verify_bytes(body, good.encode()) == body
    assert signing.verify({"a": 1}, signing.sign({"a": 1})) == {"a": 1}


def test_a_give_task_with_a_non_ascii_signature_is_refused_and_kept_for_ops(live_db):
    payload = {"sku_id": "x", "op_id": "non-ascii-signed", "quantity": 999}
    assert stock_give_task(payload, "é" * 64) == "refused"
    letter = DeadLetter.objects.get(payload__args__0__op_id="non-ascii-signed")
    assert letter.reason == "refused: signature mismatch"
    with pytest.raises(DeadLetterNotReplayable, match="signature"):
        dead_letter_replay(dead_letter_id=letter.pk, actor="admin:test")


def test_a_dead_lettered_gives_task_with_a_non_ascii_signature_is_not_replayed(live_db):
    from inventory.services.dead_letters import dead_letter_record

    body = {"gives": [{"sku_id": "x", "op_id": "y", "quantity": 999}]}
    letter = dead_letter_record(task_name=names.GIVES_TASK, payload={"body": [[body, "\u4e2d" * 64], {}, {}]},
                                reason="dead-lettered by RabbitMQ: delivery_limit")
    # the signature's verdict, not "not readable": ops learn the message was forged
    with pytest.raises(DeadLetterNotReplayable, match="signature"):
        dead_letter_replay(dead_letter_id=letter.pk, actor="admin:test")
    letter.refresh_from_db()
    assert letter.status == DeadLetter.Status.OPEN


def test_a_confirm_message_with_a_non_ascii_signature_is_refused_by_the_real_consumer(worker, make_sku,
                                                                                    make_buyers):
    from orders.models import Order
    from testsupport.purchase import publish, reserve_direct

    sku = make_sku(stock=3)
    (user, _), = make_buyers(1)
    res = reserve_direct(sku.sku_id, user.pk)
    body, headers = encoding.confirm_encode([res])
    before = DeadLetter.objects.filter(task_name=names.CONFIRM_KIND).count()
    queue = queues.confirm_queue()
    with Connection(settings.CELERY_BROKER_URL, transport_options={"confirm_publish": True}) as conn:
        Producer(conn.channel(), exchange=queue.exchange, routing_key=queue.routing_key).publish(
            body, content_type="application/json", content_encoding="utf-8",
            headers={**headers, names.SIGNATURE_HEADER: "é" * 64}, delivery_mode=2)
    wait_until(lambda: DeadLetter.objects.filter(task_name=names.CONFIRM_KIND).count() > before,
               what="the message set aside")
    letter = DeadLetter.objects.filter(task_name=names.CONFIRM_KIND).latest("pk")
    assert letter.reason == "refused: signature mismatch", letter.reason
    assert res.order_id in letter.payload["body"]
    assert not Order.objects.filter(pk=res.order_id).exists()
    publish(res)  # the genuine message still confirms it
    wait_until(lambda: Order.objects.filter(pk=res.order_id).exists(), what="genuine message confirmed")


def test_a_give_task_with_a_non_ascii_signature_through_the_real_worker_is_kept_for_ops(worker, live_db):
    from celery import current_app

    payload = {"sku_id": "x", "op_id": "non-ascii-over-the-broker", "quantity": 999}
    current_app.send_task(names.GIVE_TASK, args=[payload, "0" * 63 + "é"])
    # the task refused it (a TypeError would fail the task and leave ops nothing)
    wait_until(lambda: DeadLetter.objects.filter(payload__args__0__op_id=payload["op_id"]).exists(),
               what="the refused give kept")
    letter = DeadLetter.objects.get(payload__args__0__op_id=payload["op_id"])
    assert letter.task_name == names.GIVE_TASK and letter.reason == "refused: signature mismatch"
