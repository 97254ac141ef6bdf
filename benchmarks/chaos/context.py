"""What the faults of one run share: the stack, the sale's SKUs, and what each
fault noted (when it landed, what it hit, what it left down)."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from benchmarks.chaos.nodes import RedisNodes
from benchmarks.chaos.stack import Stack

# The clock loadgen stamps Result.started / .finished with: loss moments are
# taken on it too, so the two compare.
clock = time.perf_counter


@dataclass
class Context:
    """One run: its stack and SKUs, and what its faults noted as they landed."""

    stack: Stack
    skus: list[str]   # the sale's SKUs; the first `aimed` of them on the node the Redis faults aim at
    aimed: int = 1
    cluster: RedisNodes | None = None
    run_index: int = 0
    struck: list[float] = field(default_factory=list)  # time.time() when each fault landed (the confirm gap)
    hosts: list[str] = field(default_factory=list)     # each host fault: what it hit (the node column)
    done: list[str] = field(default_factory=list)      # the host faults landed so far
    broker_down: bool = False                          # a RabbitMQ node not running (started at the end)
    webs_down: list[int] = field(default_factory=list)     # web instances killed (started at the end)
    workers_down: list[int] = field(default_factory=list)  # workers killed (started at the end)
    targets: dict = field(default_factory=dict)        # the leader and active consumer looked up before the sale
    later: list = field(default_factory=list)          # (index in hosts, what to write there) once the run is over
    slot: int = 0     # the slot of the first SKU's keys: its master is found by it, whoever serves it now
    inflight_at_loss: list[int] = field(default_factory=list)
    redis_loss: bool = False
    losses: list[float] = field(default_factory=list)  # clock() when Redis's keys were gone
    nodes: list[str] = field(default_factory=list)     # each cluster fault: "<master>" or "<master>><successor>"
    notes: list[str] = field(default_factory=list)     # what a fault measured, for the row's note
    failures: list[str] = field(default_factory=list)  # what a fault found broken: the run is not ok
    recoveries: list[threading.Thread] = field(default_factory=list)  # a database node's return, mid-run
    faults_over: float = 0.0  # clock() when the last fault returned (a cut healed)

    @property
    def sku_id(self) -> str:
        return self.skus[0]

    def mark(self) -> None:
        """The fault lands now (the confirm gap is measured from here)."""
        self.struck.append(time.time())

    @property
    def queue(self) -> str:
        """The confirm queue of the aimed SKU's partition (the one the host faults aim at)."""
        from inventory.messages.queues import confirm_queue_name, partition_of

        return confirm_queue_name(partition_of(self.sku_id))


def inflight(sku_ids: list[str]) -> int:
    """Reservations in flight on the SKUs now (none counted of a Redis not answering)."""
    from core.redis.errors import RedisError
    from inventory.redis import live as redis_live

    n = 0
    for sku_id in sku_ids:
        try:
            live = redis_live.live_stock(sku_id=sku_id)
            n += live.inflight if live else 0
        except RedisError:
            pass
    return n
