"""The purchase path's group publisher (inventory.messages): requests that
publish at the same moment share a message, each keeps its own budget, and
the broker holds every reservation exactly once."""
from __future__ import annotations

import socket
import threading
import time
import uuid
from unittest import mock

import pytest
from django.conf import settings
from kombu import Connection, Consumer

from inventory import messages
from inventory.domain import Reservation

pytestmark = pytest.mark.usefixtures("no_worker")


def drain_confirm_queue() -> list[list[Reservation]]:
    """Every message waiting on the confirm queue (taken off it), as lists of reservations."""
    out: list[list[Reservation]] = []

    def take(message) -> None:
        out.append(messages.confirm_decode(message.body, message.headers))
        message.ack()

    with Connection(settings.CELERY_BROKER_URL) as conn:
        queue = messages.confirm_queue()(conn.channel())
        # A quorum queue with a single active consumer serves no basic.get: consume.
        with Consumer(conn.default_channel, queues=[queue], callbacks=[lambda body, message: take(message)],
                      accept=None):
            while True:
                try:
                    conn.drain_events(timeout=0.5)
                except socket.timeout:
                    return out


def reservation() -> Reservation:
    oid = uuid.uuid4().hex
    return Reservation(oid, "GROUP-TEST", 1, 1, f"k-{oid[:8]}", int(time.time() * 1000), 0)


@pytest.fixture
def empty_queue():
    messages.publish_confirms([reservation()])  # declares the queue if this is the first test
    drain_confirm_queue()
    yield
    drain_confirm_queue()


def test_concurrent_publishes_share_messages_and_each_reservation_is_stored_once(empty_queue):
    real_send = messages._send

    def slow_send(*args, **kwargs):  # a busy broker: requests gather while one message is out
        time.sleep(0.05)
        return real_send(*args, **kwargs)

    sent = [reservation() for _ in range(40)]
    errors: list[BaseException] = []

    def click(r: Reservation) -> None:
        try:
            messages.publish_confirm(r, deadline=time.monotonic() + 5)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    with mock.patch.object(messages, "_send", side_effect=slow_send):
        threads = [threading.Thread(target=click, args=(r,)) for r in sent]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    stored = drain_confirm_queue()
    got = [r.order_id for message in stored for r in message]
    assert sorted(got) == sorted(r.order_id for r in sent)  # every one, once
    assert len(stored) < len(sent)  # and grouped


def test_a_request_that_runs_out_of_budget_fails_and_is_not_published_later(empty_queue):
    real_send = messages._send
    release = threading.Event()

    def held_send(*args, **kwargs):
        release.wait(5)
        return real_send(*args, **kwargs)

    first, late = reservation(), reservation()
    outcome: dict[str, object] = {}

    def publish(name: str, r: Reservation, budget: float) -> None:
        try:
            messages.publish_confirm(r, deadline=time.monotonic() + budget)
            outcome[name] = "ok"
        except TimeoutError as exc:
            outcome[name] = exc

    with mock.patch.object(messages, "_send", side_effect=held_send):
        a = threading.Thread(target=publish, args=("first", first, 5.0))
        a.start()
        time.sleep(0.1)  # the first message is out (held); the late one waits behind it
        publish("late", late, 0.2)
        release.set()
        a.join()
    assert outcome["first"] == "ok"
    assert isinstance(outcome["late"], TimeoutError)  # the caller undoes its reservation
    time.sleep(0.3)
    stored = [r.order_id for message in drain_confirm_queue() for r in message]
    assert stored == [first.order_id]  # its budget spent before its turn: never sent
