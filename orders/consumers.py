"""The confirm consumer: a Celery worker bootstep that turns confirm messages
into orders, in bulk.

It owns one thread and one broker connection per partition of the confirm
stream (SECKILL_CONFIRM_PARTITIONS; each partition's queue has one active
consumer, so with two workers each has a standby in the other). Partitions hold
disjoint SKUs, so their threads never confirm the same SKU at once. On every
(re)connection a thread builds
a new channel, queue and consumer, so a broker restart can never leave it bound
to a dead connection (celery-batches' flush timer stays on the dead hub after a
reconnect: clokep/celery-batches#107; kombu consumers must consume again after
a reconnect: celery/kombu#814). It drains whatever the broker has ready (up to
the prefetch), waits a few milliseconds for a batch to fill, confirms it (one
MySQL transaction per SKU) and acknowledges all of it with one multiple-ack,
only after MySQL has it. A connection lost meanwhile leaves the batch
unacknowledged: the broker delivers it again, and the confirm is idempotent.

Started by `celery -A seckill_site worker` (seckill_site/celery.py adds the
step); SECKILL_CONFIRM_CONSUMER=0 leaves it out.
"""
from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time

from celery import bootsteps
from django.conf import settings
from django.db import close_old_connections
from kombu import Consumer

from core.broker import broker_connect, broker_connection, broker_host
from core.redis.errors import RedisError
from core.retry import until_done
from inventory.messages import encoding, names, publisher, queues
from inventory.redis import liveness, snapshots as redis_snapshots
from inventory.services.dead_letters import dead_letter_record
from inventory.services.snapshots import fence_pass
from orders.services.confirm import reservations_confirm

logger = logging.getLogger(__name__)

HEARTBEAT_S = 20
POLL_S = 0.25
BEAT_EVERY_S = 1.0
FENCES_EVERY_S = 0.25
# On a broker that makes the first registered consumer active (3.x): at a
# worker's start a partition it does not prefer waits this long for the worker
# that prefers it to register first; and a consumer of such a partition looks
# this often whether to hand it back.
STANDBY_WAIT_S = 2.0
HANDBACK_EVERY_S = 0.5
# A registration counts while its consumer beat consuming within this long.
REGISTERED_ALIVE_S = 3.0


class ConfirmConsumer(threading.Thread):
    """The consumer of one partition of the confirm stream."""

    def __init__(self, *, name: str | None = None, partition: int = 0, preferred: bool | None = None) -> None:
        super().__init__(name="confirm-consumer" + (f"-{partition}" if partition else ""), daemon=True)
        self.identity = name or f"{socket.gethostname()}:{os.getpid()}"
        self.partition = partition
        # None: the worker prefers no partition (SECKILL_WORKER_INDEX unset), every one alike
        self.preferred = preferred
        self.started = False  # registered once: a later registration waits for nobody
        self.handbacks = 0
        self._registration: liveness.Registration | None = None
        self._last_handback_check = 0.0
        self.stopping = threading.Event()
        self.consuming = threading.Event()
        self.batches = 0
        self._last_beat = 0.0
        self._last_fences = 0.0
        self.node: str | None = None  # the broker node of the last connection ("host:port")

    # --- lifecycle ------------------------------------------------------------
    def run(self) -> None:
        backoff = 0.5
        while not self.stopping.is_set():
            try:
                self._consume()
                backoff = 0.5
            except Exception as exc:  # connection lost, broker away, or a bug: start over
                self.consuming.clear()
                if self.stopping.is_set():
                    break
                logger.warning("confirm consumer: %r; reconnecting in %.1f s", exc, backoff,
                               exc_info=not _is_connection_error(exc))
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            finally:
                close_old_connections()
        self.consuming.clear()
        if self._registration is not None:
            with contextlib.suppress(RedisError):
                liveness.registration_drop(identity=self.identity, partition=self.partition)

    def stop(self, timeout: float = 15.0) -> None:
        self.stopping.set()
        self.join(timeout)

    # --- one connection's life -----------------------------------------------------
    def _consume(self) -> None:
        batch_size = settings.SECKILL_CONFIRM_PREFETCH
        linger = settings.SECKILL_CONFIRM_LINGER_MS / 1000
        # Every node of a broker cluster is tried (core.broker), the last one
        # last: a connection that died most likely died with its node. The
        # single active consumer of a quorum queue moves to another consumer
        # as soon as this one's node is gone, and what this one held
        # unacknowledged is delivered again (on 3.10 the switch does not wait,
        # so two consumers may briefly overlap: the confirm is idempotent).
        with broker_connection(avoid=self.node, heartbeat=HEARTBEAT_S, connect_timeout=5) as conn:
            broker_connect(conn)
            self.node = broker_host(conn)
            channel = conn.channel()
            channel.basic_qos(0, batch_size, False)
            queue, priority, ordered = self._declare(conn, channel)
            buffer: list = []
            # the tag names worker and partition (who is active: `rabbitmqctl list_consumers`)
            consumer = Consumer(channel, queues=[queue], on_message=buffer.append, no_ack=False, accept=None,
                                tag_prefix=liveness.consumer_member(self.identity, self.partition) + "/")
            before = self._registration_number()
            consumer.consume()
            self._register(before)
            self.consuming.set()
            logger.info("confirm consumer %s consuming %s on %s%s", self.identity, queue.name, self.node,
                        "" if priority is None else f" (priority {priority})")

            def idle() -> None:  # while a store is waited out: keep the connection and the heartbeat alive
                conn.heartbeat_check()
                self._beat()

            while not self.stopping.is_set():
                # Here, between batches, every message this consumer was given and
                # read is confirmed and acknowledged: the only place it may leave.
                if ordered and self._handback_due():
                    # Closing the connection returns what the broker sent since
                    # and nobody read, in order, ahead of the rest: the partition's
                    # next consumer gets it all, and this one confirms none of it.
                    self.handbacks += 1
                    logger.info("confirm consumer %s hands %s back to the worker that prefers it",
                                self.identity, queue.name)
                    self.consuming.clear()
                    return
                self._beat()
                self._send_fences()
                try:
                    conn.drain_events(timeout=POLL_S)
                except TimeoutError:
                    conn.heartbeat_check()
                    continue
                first = time.monotonic()
                while len(buffer) < batch_size:
                    try:
                        conn.drain_events(timeout=max(0.0, first + linger - time.monotonic()))
                    except TimeoutError:
                        break
                if buffer:
                    self._handle(buffer, idle)
                    channel.basic_ack(buffer[-1].delivery_tag, multiple=True)
                    buffer.clear()
                    self.batches += 1

    def _declare(self, conn, channel):
        """The partition's queue (and the dead letters'), the priority this
        worker registers with, and whether registration order decides who is
        active (a broker that ignores priorities: 3.x). There, a partition this
        worker does not prefer registers behind the worker that does, and is
        handed back to it."""
        queues.dead_letter_queue()(channel).declare()
        priority = None if self.preferred is None else (
            queues.PREFERRED_PRIORITY if self.preferred else queues.STANDBY_PRIORITY)
        queue = queues.confirm_queue(self.partition, priority=priority)(channel)
        queue.declare()
        ordered = self.preferred is False and not queues.priorities_honoured(
            conn.connection.server_properties.get("version"))
        if ordered and not self.started:
            self._wait_for_preferred(conn)
        self.started = True
        return queue, priority, ordered

    def _registration_number(self) -> int:
        if self.preferred is None:
            return 0
        try:
            return liveness.registration_number()
        except RedisError:  # 0: a hand-back too many once Redis is back, never one too few
            return 0

    def _register(self, before: int) -> None:
        """Record this registration for the others (Redis away: only this
        consumer knows it; it still consumes)."""
        if self.preferred is None:
            return
        self._registration = liveness.Registration(self.identity, self.partition, before, 0, self.preferred)
        with contextlib.suppress(RedisError):
            self._registration = liveness.registration_record(
                identity=self.identity, partition=self.partition, before=before, preferred=self.preferred)

    def _wait_for_preferred(self, conn) -> None:
        """At the worker's start, before registering on a partition it does not
        prefer: until the partition's preferred worker has registered (this one
        then stands by behind it), at most STANDBY_WAIT_S (that worker may not
        run; this one then takes the partition, and hands it back later)."""
        deadline = time.monotonic() + STANDBY_WAIT_S
        while not self.stopping.is_set() and time.monotonic() < deadline:
            with contextlib.suppress(RedisError):
                if any(r.preferred and r.identity != self.identity for r in liveness.registrations(
                        partition=self.partition, within_s=REGISTERED_ALIVE_S)):
                    return
            conn.heartbeat_check()
            self.stopping.wait(0.1)

    def _handback_due(self) -> bool:
        """A live consumer that prefers this partition may have registered after
        this one (its after-number is higher than this one's before-number), so
        it may stand by behind this one. After this one registers again its
        before-number is higher than every number taken so far: no second
        hand-back to the same registration."""
        now = time.monotonic()
        if self._registration is None or now - self._last_handback_check < HANDBACK_EVERY_S:
            return False
        self._last_handback_check = now
        try:
            found = liveness.registrations(partition=self.partition, within_s=REGISTERED_ALIVE_S)
        except RedisError:
            return False  # Redis away: keep the partition
        mine = self._registration.before
        return any(r.preferred and r.identity != self.identity and r.after > mine for r in found)

    def _handle(self, batch: list, idle) -> None:
        reservations, fences = [], []
        for message in batch:
            try:
                decoded = encoding.message_decode(message.body, message.headers)
                reservations += decoded.reservations
                fences += decoded.fences
            except encoding.BadMessage as exc:
                logger.error("refused confirm message: %s", exc)
                raw = message.body
                body = (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw))[:10000]
                until_done(lambda body=body, exc=exc: dead_letter_record(
                    task_name=names.CONFIRM_KIND, payload={"body": body}, reason=f"refused: {exc}"),
                    idle=idle, what="dead letter")
        if reservations:
            reservations_confirm(reservations=reservations, idle=idle)
        # Every reservation ahead of these fences is in MySQL now (this batch's
        # too, which can only hold reservations of other SKUs or ones the lost
        # Redis accepted): the fenced snapshots can be rebuilt exactly.
        # A store away is waited out as for the confirms (a dead MySQL connection
        # is replaced on the way); any other failure leaves the fence standing,
        # and it is sent again (redis_snapshots.FENCE_AGAIN_MS).
        # A SKU's fence comes in its SKU's partition, behind all its confirms; a
        # claims fence comes in every partition and passes once each has passed it.
        for fence, token in dict(fences).items():
            try:
                until_done(lambda fence=fence, token=token: fence_pass(
                    fence=fence, token=token, partition=self.partition), idle=idle, what=f"pass of {fence}")
            except Exception as exc:
                logger.warning("%s not passed: %r", fence, exc)

    def _send_fences(self) -> None:
        """Send the fences that are due into the confirm stream, each to its
        partition(s) (any consumer may, of any partition; a copy is harmless)."""
        now = time.monotonic()
        if now - self._last_fences < FENCES_EVERY_S:
            return
        self._last_fences = now
        try:
            due = redis_snapshots.fences_due()
            if due:
                publisher.publish_fences([(f.fence, f.token) for f in due])
                logger.info("fences sent: %s", [f.fence for f in due])
        except Exception as exc:  # Redis or the broker away: the fences stay listed
            logger.warning("fences not sent: %r", exc)

    def _beat(self) -> None:
        """Tell the world this consumer is alive (GET /api/v1/health reads it)."""
        now = time.time()
        if now - self._last_beat < BEAT_EVERY_S:
            return
        self._last_beat = now
        with contextlib.suppress(RedisError):  # health will say Redis is down
            liveness.consumer_beat(identity=self.identity, consuming=self.consuming.is_set(),
                                   partition=self.partition)


def _is_connection_error(exc: BaseException) -> bool:
    return isinstance(exc, (OSError, ConnectionError)) or "connection" in exc.__class__.__name__.lower()


class ConfirmConsumerStep(bootsteps.StartStopStep):
    """Runs a ConfirmConsumer per partition for the life of the worker."""

    label = "confirm consumer"

    def __init__(self, parent, **kwargs) -> None:
        super().__init__(parent, **kwargs)
        self.consumers: list[ConfirmConsumer] = []

    def include_if(self, parent) -> bool:
        return bool(settings.SECKILL_CONFIRM_CONSUMER)

    def start(self, parent) -> None:
        name = getattr(parent, "hostname", None)
        preferred = queues.preferred_partitions()
        no_preference = not settings.SECKILL_WORKER_INDEX
        self.consumers = [ConfirmConsumer(name=name, partition=k, preferred=None if no_preference else k in preferred)
                          for k in range(queues.partitions())]
        for consumer in self.consumers:
            consumer.start()

    def stop(self, parent) -> None:
        for consumer in self.consumers:  # all told at once: their batches finish side by side
            consumer.stopping.set()
        for consumer in self.consumers:
            consumer.stop()

    def shutdown(self, parent) -> None:
        self.stop(parent)
