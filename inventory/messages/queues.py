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


def confirm_queue(partition: int = 0) -> Queue:
    """A partition of the confirm stream: a quorum queue (durable, counts
    deliveries) with one active consumer at a time, so confirms of a SKU are
    applied in the order the broker received them; past the delivery limit a
    message is dead-lettered. Every partition is bound to the one direct
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
