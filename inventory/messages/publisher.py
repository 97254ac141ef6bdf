"""Publishing on the confirm stream: a connection per thread and confirm mode,
`send` (one message, persistent, confirmed by the broker or raising), and the
sends of the sweeps and the confirm consumer: reservations again
(`publish_confirms`) and fences (`publish_fences`), each message confirmed
before the next. The purchase path's own publish is group_publisher."""
from __future__ import annotations

import contextlib
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from amqp.exceptions import MessageNacked
from django.conf import settings
from kombu import Connection

from core.broker import broker_connect, broker_connection, broker_host
from inventory.domain import Fence, Reservation
from inventory.messages.encoding import confirm_encode, fence_encode
from inventory.messages.queues import confirm_queue, dead_letter_queue, fence_partitions, partition_of


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
        with contextlib.suppress(Exception):
            pub.conn.release()


def send(body: bytes, headers: dict[str, str], *, deadline: float, confirm: bool = True,
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
            # second). Sent again while the budget lasts, on a new connection:
            # a channel refused once can stay refused after the new leader
            # took over, while a new one is accepted at once (docs/failures.md,
            # "Beyond one host"). A copy the queue kept after all is applied once.
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
            send(body, headers, deadline=time.monotonic() + PUBLISH_TIMEOUT_S, partition=partition)
            sent += 1
    return sent


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
            send(body, headers, deadline=time.monotonic() + PUBLISH_TIMEOUT_S, partition=partition)
