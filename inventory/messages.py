"""Every message that leaves the process: names, bodies, signing and publishing.

Confirm messages carry reservations from the gate to the confirm consumer
(`orders.consumers`). They are not Celery task messages: the body is a small
signed JSON list, read in bulk by one consumer per queue, because Celery's
per-message machinery cost more CPU than the confirm itself (docs/architecture.md,
"The confirm consumer"). Gives and sweeps are ordinary Celery tasks, sent by name.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Sequence

from django.conf import settings
from kombu import Connection, Exchange, Queue

from core.broker import broker_connect, broker_connection, broker_host
from inventory import signing
from inventory.domain import Reservation

logger = logging.getLogger(__name__)

CONFIRM_KIND = "confirm"
FENCE_KIND = "fence"
SIGNATURE_HEADER = "x-seckill-sig"
KIND_HEADER = "x-seckill-kind"
FORMAT_VERSION = 1

# The Celery names of the give tasks (inventory.tasks), published from here.
GIVE_TASK = "inventory.tasks.stock_give_task"
GIVES_TASK = "inventory.tasks.stock_gives_task"

# A dead letter's kind (DeadLetter.task_name): CONFIRM_KIND or FENCE_KIND for a
# message of the confirm queue, otherwise the Celery name of the task message.
# Before issue 18 the give tasks' own refusals wrote short spellings; rows of
# that time are renamed by migration inventory 0011, and a row an older worker
# writes during an upgrade still reads as the task it is.
LEGACY_KINDS = {"stock_give": GIVE_TASK, "stock_gives": GIVES_TASK}


def dead_letter_kind(task_name: str) -> str:
    """The kind a dead letter's stored `task_name` stands for."""
    return LEGACY_KINDS.get(task_name, task_name)


# --- Queues ---------------------------------------------------------------------

def confirm_queue() -> Queue:
    """The confirm stream: a quorum queue (durable, counts deliveries) with one
    active consumer at a time, so confirms of a SKU are applied in the order the
    broker received them; past the delivery limit a message is dead-lettered."""
    name = settings.SECKILL_CONFIRM_QUEUE
    dead = settings.CELERY_DEAD_LETTER
    return Queue(
        name, Exchange(name, type="direct", durable=True), routing_key=name, durable=True,
        queue_arguments={
            "x-queue-type": "quorum",
            "x-single-active-consumer": True,
            "x-delivery-limit": settings.SECKILL_CONFIRM_DELIVERY_LIMIT,
            "x-dead-letter-exchange": dead.exchange.name,
            "x-dead-letter-routing-key": dead.routing_key,
        },
    )


def dead_letter_queue() -> Queue:
    return settings.CELERY_DEAD_LETTER


# --- The confirm message --------------------------------------------------------------

class BadMessage(Exception):
    """A confirm message that is not ours or not well formed: set aside, never applied."""


def confirm_encode(reservations: Sequence[Reservation]) -> tuple[bytes, dict[str, str]]:
    rows = [[r.order_id, r.sku_id, r.user_id, r.quantity, r.reserved_ms, r.epoch, r.idempotency_key]
            for r in reservations]
    body = json.dumps({"v": FORMAT_VERSION, "r": rows}, separators=(",", ":")).encode()
    return body, {SIGNATURE_HEADER: signing.sign_bytes(body), KIND_HEADER: CONFIRM_KIND}


def fence_encode(fences: Sequence[tuple[str, str]]) -> tuple[bytes, dict[str, str]]:
    """Fences of SKUs whose snapshot Redis lost: (sku_id, fence token) pairs
    (inventory.services.snapshots.stock_fence_pass)."""
    body = json.dumps({"v": FORMAT_VERSION, "f": [list(f) for f in fences]}, separators=(",", ":")).encode()
    return body, {SIGNATURE_HEADER: signing.sign_bytes(body), KIND_HEADER: FENCE_KIND}


@dataclass(frozen=True)
class Decoded:
    reservations: list[Reservation]
    fences: list[tuple[str, str]]


def message_decode(body: bytes | str, headers: dict | None) -> Decoded:
    """A message of the confirm queue: reservations, or fences."""
    headers = headers or {}
    if isinstance(body, str):  # py-amqp decodes bodies that declare a text encoding
        body = body.encode("utf-8")
    try:
        signing.verify_bytes(body, headers.get(SIGNATURE_HEADER))
        data = json.loads(body)
        if data.get("v") != FORMAT_VERSION:
            raise BadMessage(f"unknown format version {data.get('v')!r}")
        if headers.get(KIND_HEADER) == FENCE_KIND:
            fences = [(sku, token) for sku, token in data["f"]]
            if not all(isinstance(x, str) for f in fences for x in f):
                raise BadMessage("malformed fence")
            return Decoded([], fences)
        out = []
        for oid, sku, user, qty, ms, epoch, key in data["r"]:
            if not (isinstance(oid, str) and isinstance(sku, str) and isinstance(key, str)):
                raise BadMessage("malformed reservation")
            out.append(Reservation(oid, sku, int(user), int(qty), key, int(ms), int(epoch)))
        return Decoded(out, [])
    except signing.BadSignature as exc:
        raise BadMessage(str(exc)) from exc
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BadMessage(f"{exc.__class__.__name__}: {exc}") from exc


def confirm_decode(body: bytes | str, headers: dict | None) -> list[Reservation]:
    return message_decode(body, headers).reservations


# --- Publishing -------------------------------------------------------------------

@dataclass
class _Publisher:
    conn: Connection
    channel: object  # py-amqp's channel, in confirm mode when the connection asks for it
    exchange: str
    routing_key: str


_local = threading.local()
# A broker that stops answering (memory alarm, partition) must not hold a caller
# without end: past this a publish fails.
PUBLISH_TIMEOUT_S = 3.0


def _publisher(confirm: bool) -> _Publisher:
    cache = getattr(_local, "publishers", None)
    if cache is None:
        cache = _local.publishers = {}
    pub = cache.get(confirm)
    if pub is None:
        # A connection is made again only after one died: the node it was on
        # is tried last (a broker cluster: core.broker), so the publish that
        # failed is sent again on another node, where the queue's replicas
        # still take messages.
        conn = broker_connection(avoid=getattr(_local, "node", None), connect_timeout=2,
                                 transport_options={"confirm_publish": confirm})
        _local.node = broker_host(broker_connect(conn))
        queue = confirm_queue()
        channel = conn.channel()
        dead_letter_queue()(channel).declare()
        queue(channel).declare()  # idempotent; the consumer declares the same
        pub = cache[confirm] = _Publisher(conn, channel, queue.exchange.name, queue.routing_key)
    return pub


def _drop(confirm: bool) -> None:
    pub = getattr(_local, "publishers", {}).pop(confirm, None)
    if pub is not None:
        try:
            pub.conn.release()
        except Exception:
            pass


def _send(body: bytes, headers: dict[str, str], *, deadline: float, confirm: bool = True) -> None:
    """Publish once, persistent; with `confirm`, return only when the broker
    has the message. A connection that died (broker restarted, or one node of
    a cluster lost) is replaced once if time remains, on another node when
    there are several, and the message is sent again there and confirmed
    anew: a message the dead connection had sent but not seen confirmed may
    exist twice, and the confirm consumer applies a reservation once. A
    timeout leaves the outcome unknown, so the caller must treat the message
    as possibly stored."""
    for attempt in (1, 2):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("publish budget spent")
        try:
            # The message kombu's Producer.publish would build (persistent, the
            # same properties), handed to py-amqp under it: the Producer's
            # per-publish preparation and declaration checks cost the web CPU on
            # every message, and a sale sends about one message per click at
            # this machine's rates (the queue was declared with the channel).
            pub = _publisher(confirm)
            message = pub.channel.prepare_message(body, 0, "application/json", "binary", headers,
                                                  {"delivery_mode": 2})
            pub.channel.basic_publish(message, exchange=pub.exchange, routing_key=pub.routing_key,
                                      timeout=remaining)
            return
        except Exception:
            _drop(confirm)
            if attempt == 2:
                raise


@dataclass
class _Waiting:
    reservation: Reservation
    deadline: float
    done: threading.Event
    error: BaseException | None = None


class _GroupPublisher:
    """The purchase path's publishes of one process, sent together.

    A request hands its reservation over and waits. One thread per process
    publishes whatever has gathered as one message (up to
    SECKILL_MESSAGE_CHUNK reservations), waits for the broker's confirm, and
    wakes every request of the message; what arrives meanwhile goes in the next
    one. Nothing waits on purpose: under light load a message carries one
    reservation, under a sale's load many, so the broker, the confirm consumer
    and the web spend per message, not per click (docs/benchmark.md,
    "The selling phase"). Each request keeps its own budget: one that gives up waiting
    undoes its own reservation exactly as after a failed publish, and a copy
    of it published after all is refused by the confirm (its decision says
    released: inventory.services.decisions)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ready = threading.Condition(self.lock)
        self.waiting: list[_Waiting] = []
        self.pid = 0

    def publish(self, reservation: Reservation, *, deadline: float) -> None:
        entry = _Waiting(reservation, deadline, threading.Event())
        with self.lock:
            self._running()
            self.waiting.append(entry)
            self.ready.notify()
        if not entry.done.wait(max(0.0, deadline - time.monotonic())):
            raise TimeoutError("publish not confirmed within the budget")
        if entry.error is not None:
            raise entry.error

    def _running(self) -> None:
        if self.pid != os.getpid():  # first use in this process (gunicorn forks its workers)
            self.pid = os.getpid()
            self.waiting = []
            threading.Thread(target=self._loop, name="confirm-publisher", daemon=True).start()

    def _loop(self) -> None:
        while True:
            with self.lock:
                while not self.waiting:
                    self.ready.wait()
                chunk = settings.SECKILL_MESSAGE_CHUNK
                batch, self.waiting = self.waiting[:chunk], self.waiting[chunk:]
            now = time.monotonic()
            live = [w for w in batch if w.deadline > now]
            late = [w for w in batch if w.deadline <= now]  # their requests have given up
            try:
                if live:
                    body, headers = confirm_encode([w.reservation for w in live])
                    _send(body, headers, deadline=min(w.deadline for w in live),
                          confirm=settings.SECKILL_WEB_PUBLISH_CONFIRM)
            except BaseException as exc:  # noqa: BLE001 - every waiter hears of it
                for w in live:
                    w.error = exc
            for w in late:
                w.error = TimeoutError("publish budget spent before the message left")
            for w in batch:
                w.done.set()


_group = _GroupPublisher()


def publish_confirm(reservation: Reservation, *, deadline: float) -> None:
    """The purchase path's publish: the reservation is in a message the broker
    confirmed before `deadline` (time.monotonic) when this returns; raises
    otherwise (then the message may or may not exist)."""
    _group.publish(reservation, deadline=deadline)


def publish_confirms(reservations: Sequence[Reservation]) -> int:
    """Publish reservations again (orphan sweep), a bounded number per message,
    each message confirmed. Returns how many messages were sent."""
    chunk = settings.SECKILL_MESSAGE_CHUNK
    sent = 0
    for i in range(0, len(reservations), chunk):
        body, headers = confirm_encode(reservations[i:i + chunk])
        _send(body, headers, deadline=time.monotonic() + PUBLISH_TIMEOUT_S)
        sent += 1
    return sent


def publish_fences(fences: Sequence[tuple[str, str]]) -> None:
    """Send fences into the confirm queue, behind everything already in it
    (confirmed by the broker, or raises)."""
    chunk = settings.SECKILL_MESSAGE_CHUNK
    for i in range(0, len(fences), chunk):
        body, headers = fence_encode(fences[i:i + chunk])
        _send(body, headers, deadline=time.monotonic() + PUBLISH_TIMEOUT_S)


def publish_gives(payloads: list[dict]) -> str:
    """Several gives for Redis in one signed Celery task message. Returns the task id."""
    from celery import current_app

    body = {"gives": payloads}
    return current_app.send_task(GIVES_TASK, args=[body, signing.sign(body)]).id


def publish_give(payload: dict) -> str:
    """A give for Redis (MySQL already committed it), as a signed Celery task.
    Returns the task id."""
    from celery import current_app

    return current_app.send_task(GIVE_TASK, args=[payload, signing.sign(payload)]).id


# --- The broker, as the health check and the live view see it -------------------------------

_probe_lock = threading.Lock()
_probe: dict[str, Connection] = {}
_probe_lost: list[str] = []  # the node of the probe connection that died last


@dataclass(frozen=True)
class QueueDepth:
    messages: int   # waiting to be delivered
    consumers: int


def confirm_queue_depth() -> QueueDepth:
    """The confirm queue's depth, over one connection kept per process (a probe
    opens no connection per call). Raises when the broker cannot be reached.

    A kept connection found dead (its node lost: a broker cluster) is replaced
    at once, on another node, so one node down never fails the probe."""
    with _probe_lock:
        for attempt in (1, 2):
            conn = _probe.get("conn")
            kept = conn is not None
            try:
                if conn is None:
                    conn = broker_connection(avoid=_probe_lost[-1] if _probe_lost else None, connect_timeout=2)
                    _probe["conn"] = broker_connect(conn)
                _name, messages, consumers = conn.default_channel.queue_declare(
                    queue=settings.SECKILL_CONFIRM_QUEUE, passive=True)
                return QueueDepth(int(messages), int(consumers))
            except Exception as exc:
                _probe.pop("conn", None)
                if conn is not None:
                    _probe_lost[:] = [broker_host(conn)]
                    try:
                        conn.release()
                    except Exception:
                        pass
                if "NOT_FOUND" in str(exc):  # not declared yet: nothing waits in it
                    return QueueDepth(0, 0)
                if not kept or attempt == 2:  # a fresh connection tried every node already
                    raise
        raise AssertionError("unreachable")
