"""The confirm stream's partitions and queues, and the dead-letter queue.

The confirm stream may be split in partitions by SKU
(SECKILL_CONFIRM_PARTITIONS): a SKU's reservations and its fence always go to
its partition's queue (`partition_of`), so they stay in order there; a shard's
claims fence, which must follow the reservations of any SKU, goes to every
partition (`fence_partitions`; accounts.token_cache.claims_fence_pass).
"""
from __future__ import annotations

import zlib

from django.conf import settings
from kombu import Exchange, Queue

from inventory.domain import ClaimsFence, Fence


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


# The consumer priorities (x-priority) of a worker's consumers: its preferred
# partitions' higher. A broker whose single active consumer honours them (quorum
# queues from RabbitMQ 4.0) makes the highest-priority consumer active, and
# switches to a higher one that registers only once the active consumer has
# settled every message it holds: a partition never moves with a batch in flight.
PREFERRED_PRIORITY = 10
STANDBY_PRIORITY = 0


def preferred_partitions(index: int | None = None, workers: int | None = None) -> frozenset[int]:
    """The partitions worker `index` (1-based, SECKILL_WORKER_INDEX) of `workers`
    (SECKILL_WORKERS) prefers to be active on: k with k % workers == index - 1.
    Index 0: none (no preference)."""
    index = settings.SECKILL_WORKER_INDEX if index is None else index
    workers = max(1, settings.SECKILL_WORKERS if workers is None else workers)
    if index < 1:
        return frozenset()
    return frozenset(k for k in range(partitions()) if k % workers == (index - 1) % workers)


def priorities_honoured(version: str | bytes | None) -> bool:
    """Whether a RabbitMQ of this version (its server properties' "version")
    lets consumer priorities choose a quorum queue's single active consumer:
    from 4.0 on; 3.x makes the first consumer registered active, whatever its
    priority."""
    if isinstance(version, bytes):
        version = version.decode("ascii", "replace")
    head = (version or "").split(".", 1)[0]
    return head.isdigit() and int(head) >= 4


def confirm_queue(partition: int = 0, *, priority: int | None = None) -> Queue:
    """A partition of the confirm stream: a quorum queue (durable, counts
    deliveries) with one active consumer at a time, so confirms of a SKU are
    applied in the order the broker received them; past the delivery limit a
    message is dead-lettered. `priority` is a consumer's x-priority
    (PREFERRED_PRIORITY on the partitions its worker prefers). Every partition is bound to the one direct
    exchange, which a single queue's deployment already has, by its own routing
    key (its name): the publisher picks the partition, so no exchange type or
    plugin is needed."""
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
        # Used by a consumer of the queue only (its basic.consume), never declared.
        consumer_arguments=None if priority is None else {"x-priority": priority},
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


def fence_partitions(fence: Fence) -> list[int]:
    """The partitions a fence goes to: a SKU's fence to its SKU's (behind every
    confirm of that SKU); a shard's claims fence, whose claims named
    reservations of any SKU, to every one (it passes once every copy has)."""
    return list(range(partitions())) if isinstance(fence, ClaimsFence) else [partition_of(fence.sku_id)]
