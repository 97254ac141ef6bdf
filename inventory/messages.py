"""Every message that leaves the process: names, bodies, signing and publishing.

Confirm messages carry reservations from the gate to the confirm consumer
(`orders.consumers`). They are not Celery task messages: the body is a small
signed JSON list, read in bulk by one active consumer per queue, because Celery's
per-message machinery cost more CPU than the confirm itself (docs/architecture.md,
"The confirm consumer"). Gives and sweeps are ordinary Celery tasks, sent by name.

The confirm stream may be split in partitions by SKU
(SECKILL_CONFIRM_PARTITIONS): a SKU's reservations and its fence always go to
its partition's queue (`partition_of`), so they stay in order there; a shard's
claims fence, which must follow the reservations of any SKU, goes to every
partition (accounts.token_cache.claims_fence_pass).
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
import zlib
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Sequence

from django.conf import settings
from amqp.exceptions import MessageNacked
from kombu import Connection, Exchange, Queue

from core.broker import broker_connect, broker_connection, broker_host
from inventory import signing
from inventory.domain import ClaimsFence, Fence, Reservation, fence_name, fence_named

logger = logging.getLogger(__name__)

CONFIRM_KIND = "confirm"
FENCE_KIND = "fence"
SIGNATURE_HEADER = "x-seckill-sig"
KIND_HEADER = "x-seckill-kind"
# Version 2 rows end with the unit price; a version 1 message (sent before
# prices were kept) still reads, its reservations without a price.
FORMAT_VERSION = 2
_READS = (1, 2)
# A fence's body did not change with version 2: it keeps version 1, which a
# worker of before still reads.
FENCE_FORMAT_VERSION = 1

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

def partitions() -> int:
    """How many partitions the confirm stream has (SECKILL_CONFIRM_PARTITIONS)."""
    return max(1, int(settings.SECKILL_CONFIRM_PARTITIONS))


def partition_of(sku_id: str) -> int:
    """The partition of a SKU's confirm messages: a hash every process computes
    alike (Python's own hash() is salted per process)."""
    n = partitions()
    return 0 if n == 1 else zlib.crc32(sku_id.encode()) % n


def confirm_queue_name(partition: int = 0) -> str:
    """Partition 0 keeps the one queue's name, so a change from 1 partition to
    more keeps the messages already in it."""
    base = settings.SECKILL_CONFIRM_QUEUE
    return base if partition == 0 else f"{base}.{partition}"


def confirm_queue(partition: int = 0) -> Queue:
    """A partition of the confirm stream: a quorum queue (durable, counts
    deliveries) with one active consumer at a time, so confirms of a SKU are
    applied in the order the broker received them; past the delivery limit a
    message is dead-lettered. Every partition is bound to the one direct
    exchange of before by its own routing key (its name): the publisher picks
    the partition, so no exchange type or plugin is needed."""
    name = confirm_queue_name(partition)
    exchange = settings.SECKILL_CONFIRM_QUEUE
    dead = settings.CELERY_DEAD_LETTER
    return Queue(
        name, Exchange(exchange, type="direct", durable=True), routing_key=name, durable=True,
        queue_arguments={
            "x-queue-type": "quorum",
            "x-single-active-consumer": True,
            "x-delivery-limit": settings.SECKILL_CONFIRM_DELIVERY_LIMIT,
            "x-dead-letter-exchange": dead.exchange.name,
            "x-dead-letter-routing-key": dead.routing_key,
        },
    )


def confirm_queues() -> list[Queue]:
    """Every partition's queue, partition 0 first."""
    return [confirm_queue(k) for k in range(partitions())]


# Test and benchmark clean-ups delete this many partitions' queues, whatever the
# setting of the run is: a run with more partitions may have left some.
PARTITIONS_CLEANED = 16


def confirm_queue_names_all() -> list[str]:
    """The queue names of every partition a run may have used (its clean-up)."""
    return [confirm_queue_name(k) for k in range(max(partitions(), PARTITIONS_CLEANED))]


def dead_letter_queue() -> Queue:
    return settings.CELERY_DEAD_LETTER


# --- The confirm message --------------------------------------------------------------

class BadMessage(Exception):
    """A confirm message that is not ours or not well formed: set aside, never applied."""


def confirm_encode(reservations: Sequence[Reservation]) -> tuple[bytes, dict[str, str]]:
    rows = [[r.order_id, r.sku_id, r.user_id, r.quantity, r.reserved_ms, r.epoch, r.idempotency_key, r.unit_price]
            for r in reservations]
    body = json.dumps({"v": FORMAT_VERSION, "r": rows}, separators=(",", ":")).encode()
    return body, {SIGNATURE_HEADER: signing.sign_bytes(body), KIND_HEADER: CONFIRM_KIND}


def fence_encode(fences: Sequence[tuple[Fence, str]]) -> tuple[bytes, dict[str, str]]:
    """(fence, token) pairs, each fence by its name (inventory.domain.fence_name;
    inventory.services.snapshots.fence_pass)."""
    rows = [[fence_name(fence), token] for fence, token in fences]
    body = json.dumps({"v": FENCE_FORMAT_VERSION, "f": rows}, separators=(",", ":")).encode()
    return body, {SIGNATURE_HEADER: signing.sign_bytes(body), KIND_HEADER: FENCE_KIND}


@dataclass(frozen=True)
class Decoded:
    reservations: list[Reservation]
    fences: list[tuple[Fence, str]]


def message_decode(body: bytes | str, headers: dict | None) -> Decoded:
    """A message of the confirm queue: reservations, or fences."""
    headers = headers or {}
    if isinstance(body, str):  # py-amqp decodes bodies that declare a text encoding
        body = body.encode("utf-8")
    try:
        signing.verify_bytes(body, headers.get(SIGNATURE_HEADER))
        data = json.loads(body)
        if data.get("v") not in _READS:
            raise BadMessage(f"unknown format version {data.get('v')!r}")
        if headers.get(KIND_HEADER) == FENCE_KIND:
            fences = [(sku, token) for sku, token in data["f"]]
            if not all(isinstance(x, str) for f in fences for x in f):
                raise BadMessage("malformed fence")
            return Decoded([], [(fence_named(name), token) for name, token in fences])
        out = []
        width = 7 if data["v"] == 1 else 8
        for row in data["r"]:
            if len(row) != width:
                raise BadMessage("malformed reservation")
            oid, sku, user, qty, ms, epoch, key, price = (*row, "") if width == 7 else row
            if not all(isinstance(x, str) for x in (oid, sku, key, price)):
                raise BadMessage("malformed reservation")
            out.append(Reservation(oid, sku, int(user), int(qty), key, int(ms), int(epoch), price))
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
    declared: set[int]  # the partitions whose queue this channel declared


_local = threading.local()
# A broker that stops answering (memory alarm, partition) must not hold a caller
# without end: past this a publish fails.
PUBLISH_TIMEOUT_S = 3.0
# A publish the queue refused is sent again after this, doubling up to the cap.
REFUSED_BACKOFF_S, REFUSED_BACKOFF_MAX_S = 0.05, 0.4


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
        channel = conn.channel()
        dead_letter_queue()(channel).declare()
        pub = cache[confirm] = _Publisher(conn, channel, set())
    return pub


def _route(pub: _Publisher, partition: int) -> tuple[str, str]:
    """The exchange and routing key of a partition, its queue declared once per
    channel (idempotent; the consumer declares the same)."""
    queue = confirm_queue(partition)
    if partition not in pub.declared:
        queue(pub.channel).declare()
        pub.declared.add(partition)
    return queue.exchange.name, queue.routing_key


def _drop(confirm: bool) -> None:
    pub = getattr(_local, "publishers", {}).pop(confirm, None)
    if pub is not None:
        try:
            pub.conn.release()
        except Exception:
            pass


def _send(body: bytes, headers: dict[str, str], *, deadline: float, confirm: bool = True,
          partition: int = 0) -> None:
    """Publish once to a partition's queue, persistent; with `confirm`, return
    only when the broker has the message. A connection that died (broker
    restarted, or one node of a cluster lost) is replaced once if time
    remains, on another node when there are several, and the message is sent
    again there and confirmed anew: a message the dead connection had sent but
    not seen confirmed may exist twice, and the confirm consumer applies a
    reservation once. A publish the queue refused (basic.nack) is sent again
    while the budget lasts. A timeout leaves the outcome unknown, so the caller
    must treat the message as possibly stored."""
    reconnected, refusals = False, 0
    while True:
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
            exchange, routing_key = _route(pub, partition)
            message = pub.channel.prepare_message(body, 0, "application/json", "binary", headers,
                                                  {"delivery_mode": 2})
            pub.channel.basic_publish(message, exchange=exchange, routing_key=routing_key,
                                      timeout=remaining)
            return
        except MessageNacked:
            # The queue refused it: a quorum queue whose leader was lost
            # refuses publishes until its replicas elect another (about a
            # second; the fault matrix's leader kills answered up to 92 clicks
            # 503 before this). Sent again while the budget lasts, on a new
            # connection: a channel that was refused once went on being
            # refused after the new leader took over (seen on the cluster leg:
            # 15 minutes of refusals on the kept channel, none on new ones). A
            # copy the queue kept after all is applied once.
            _drop(confirm)
            refusals += 1
            pause = min(REFUSED_BACKOFF_S * 2 ** (refusals - 1), REFUSED_BACKOFF_MAX_S)
            if deadline - time.monotonic() <= pause:
                raise
            time.sleep(pause)
        except Exception:
            _drop(confirm)
            if reconnected:
                raise
            reconnected = True


@dataclass
class _Waiting:
    reservation: Reservation
    deadline: float
    done: threading.Event
    error: BaseException | None = None


class _GroupPublisher:
    """The purchase path's publishes of one process to one partition, sent together.

    A request hands its reservation over and waits. One thread per process and
    partition (its own connection: a slow queue leader holds only its own
    partition's requests) publishes whatever has gathered as one message (up to
    SECKILL_MESSAGE_CHUNK reservations), waits for the broker's confirm, and
    wakes every request of the message; what arrives meanwhile goes in the next
    one. Nothing waits on purpose: under light load a message carries one
    reservation, under a sale's load many, so the broker, the confirm consumer
    and the web spend per message, not per click (docs/benchmark.md,
    "The selling phase"). Each request keeps its own budget: one that gives up waiting
    undoes its own reservation exactly as after a failed publish, and a copy
    of it published after all is refused by the confirm (its decision says
    undone: inventory.services.decisions)."""

    def __init__(self, partition: int = 0) -> None:
        self.partition = partition
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
            name = "confirm-publisher" + (f"-{self.partition}" if self.partition else "")
            threading.Thread(target=self._loop, name=name, daemon=True).start()

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
                          confirm=settings.SECKILL_WEB_PUBLISH_CONFIRM, partition=self.partition)
            except BaseException as exc:  # noqa: BLE001 - every waiter hears of it
                for w in live:
                    w.error = exc
            for w in late:
                w.error = TimeoutError("publish budget spent before the message left")
            for w in batch:
                w.done.set()


_groups: dict[int, _GroupPublisher] = {}
_groups_lock = threading.Lock()


def _group(partition: int) -> _GroupPublisher:
    group = _groups.get(partition)
    if group is None:
        with _groups_lock:
            group = _groups.setdefault(partition, _GroupPublisher(partition))
    return group


def publish_confirm(reservation: Reservation, *, deadline: float) -> None:
    """The purchase path's publish: the reservation is in a message the broker
    confirmed before `deadline` (time.monotonic) when this returns; raises
    otherwise (then the message may or may not exist)."""
    _group(partition_of(reservation.sku_id)).publish(reservation, deadline=deadline)


def _by_partition(items: Iterable, sku_of) -> dict[int, list]:
    """Items split by their SKU's partition, each partition's in their order."""
    out: dict[int, list] = defaultdict(list)
    for item in items:
        out[partition_of(sku_of(item))].append(item)
    return dict(sorted(out.items()))


def publish_confirms(reservations: Sequence[Reservation]) -> int:
    """Publish reservations again (orphan sweep, dead-letter replay), each to its
    SKU's partition, a bounded number per message, each message confirmed.
    Returns how many messages were sent."""
    chunk = settings.SECKILL_MESSAGE_CHUNK
    sent = 0
    for partition, rows in _by_partition(reservations, lambda r: r.sku_id).items():
        for i in range(0, len(rows), chunk):
            body, headers = confirm_encode(rows[i:i + chunk])
            _send(body, headers, deadline=time.monotonic() + PUBLISH_TIMEOUT_S, partition=partition)
            sent += 1
    return sent


def fence_partitions(fence: Fence) -> list[int]:
    """The partitions a fence goes to: a SKU's fence to its SKU's (behind every
    confirm of that SKU); a shard's claims fence, whose claims named
    reservations of any SKU, to every one (it passes once every copy has)."""
    return list(range(partitions())) if isinstance(fence, ClaimsFence) else [partition_of(fence.sku_id)]


def publish_fences(fences: Sequence[tuple[Fence, str]]) -> None:
    """Send fences into the confirm stream, each behind everything already in
    its partition(s) (fence_partitions; confirmed by the broker, or raises)."""
    chunk = settings.SECKILL_MESSAGE_CHUNK
    routed: dict[int, list[tuple[Fence, str]]] = defaultdict(list)
    for fence in fences:
        for partition in fence_partitions(fence[0]):
            routed[partition].append(fence)
    for partition, rows in sorted(routed.items()):
        for i in range(0, len(rows), chunk):
            body, headers = fence_encode(rows[i:i + chunk])
            _send(body, headers, deadline=time.monotonic() + PUBLISH_TIMEOUT_S, partition=partition)


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
    """The confirm stream's depth: every partition's messages and consumers
    summed. Raises when the broker cannot be reached."""
    depths = confirm_queue_depths()
    return QueueDepth(sum(d.messages for d in depths), sum(d.consumers for d in depths))


def confirm_queue_depths() -> list[QueueDepth]:
    """Each partition's depth, partition 0 first, over one connection kept per
    process (a probe opens no connection per call). Raises when the broker
    cannot be reached."""
    with _probe_lock:
        return [_depth(confirm_queue_name(k)) for k in range(partitions())]


def _depth(name: str) -> QueueDepth:
    """One queue's depth over the kept connection. A kept connection found dead
    (its node lost: a broker cluster) is replaced at once, on another node, so
    one node down never fails the probe."""
    for attempt in (1, 2):
        conn = _probe.get("conn")
        kept = conn is not None
        try:
            if conn is None:
                conn = broker_connection(avoid=_probe_lost[-1] if _probe_lost else None, connect_timeout=2)
                _probe["conn"] = broker_connect(conn)
            _name, messages, consumers = conn.default_channel.queue_declare(queue=name, passive=True)
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
