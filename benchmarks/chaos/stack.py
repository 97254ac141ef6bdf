"""The fault matrix's servers and store set: one web tier, a worker and beat on
one host; with --cluster as `bash scripts/up --cluster` runs them, two web
instances behind HAProxy, two workers and beat, on the local clusters."""
from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from benchmarks.harness import processes, stores
from benchmarks.harness.processes import Server

if TYPE_CHECKING:  # the plan reads this module's names without the clusters' modules
    from backups.server import LocalServer
    from benchmarks.chaos.nodes import GaleraNodes, RabbitNodes, RedisNodes

DB_NAME, QUEUE, REDIS_DB, CLUSTER_PREFIX = "seckill_chaos", "seckill-chaos", 6, "seckill-chaos"
EXTRA_ENV = {
    # Short deadlines so a run drains in seconds; no expiry or reconciliation by
    # beat during a run (the run reconciles itself, at the end).
    "SECKILL_ORPHAN_GRACE_SECONDS": "3",
    "SECKILL_ORPHAN_SWEEP_SECONDS": "2",
    "SECKILL_OUTBOX_SWEEP_SECONDS": "2",
    "SECKILL_EXPIRY_SWEEP_SECONDS": "3600",
    "SECKILL_RECONCILE_SECONDS": "3600",
    "SECKILL_THROTTLE_RATE": "0",
    # the payers (--cluster) pay and cancel many of a buyer's orders in a row
    "SECKILL_ORDER_CALLS_RATE": "0",
}

# --cluster's RabbitMQ cluster: its own three nodes, apart from bash
# scripts/cluster's (5681) and the test leg's (5684).
RABBITMQ_BASE = 5687
# --cluster's MariaDB Galera cluster: its own three nodes (3331-3333, the front
# on 3334), apart from scripts/cluster's (3311) and the test leg's (3321, 3326).
MARIADB_BASE = 3331
CLUSTER_WORKERS = 2


# mariadb-restore's store set: its own MariaDB on the first free port of these,
# its own Redis database and queue (apart from a matrix run on the machine's).
RESTORE_PORTS, RESTORE_REDIS_DB, RESTORE_QUEUE = range(3396, 3400), 13, "seckill-chaos-restore"


def configure(cluster: RedisNodes | None, rabbit: RabbitNodes | None = None, partitions: int = 1,
              db_port: int | None = None, db_host: str | None = None, db_front: int | None = None) -> None:
    """The run's own stores: Redis db 6 of the single Redis, or its own prefix
    on the cluster; the machine's RabbitMQ, or the RabbitMQ cluster's nodes;
    the machine's MariaDB, or (`db_front`) the Galera cluster's front;
    the confirm stream in `partitions` (every process started inherits it)."""
    extra = dict(EXTRA_ENV, SECKILL_CONFIRM_PARTITIONS=str(partitions))
    if rabbit is not None:
        extra["CELERY_BROKER_URL"] = rabbit.url()
    if db_port is not None:
        stores.configure(db_name=DB_NAME, redis_db=RESTORE_REDIS_DB, queue=RESTORE_QUEUE, extra_env=extra,
                         db_port=db_port)
    elif cluster is None:
        stores.configure(db_name=DB_NAME, redis_db=REDIS_DB, queue=QUEUE, extra_env=extra)
    else:
        stores.configure(db_name=DB_NAME, redis_db=0, queue=QUEUE, extra_env=extra,
                         redis_url=cluster.url(), redis_prefix=CLUSTER_PREFIX, db_host=db_host,
                         db_port=db_front or 3306)


@dataclass
class Stack:
    """The servers of the matrix, started once and healed after every run."""

    port: int               # where the load goes: the web tier, or HAProxy in front of the instances
    webs: list[Server]      # one web tier, or (--cluster) two instances behind HAProxy
    workers: list[Server]   # one worker, or (--cluster) two: one active confirm consumer, one standby
    beat: Server
    web_ports: list[int] = field(default_factory=list)
    worker_names: list[str] = field(default_factory=list)  # their Celery node names, as their consumer tags begin
    proxy: Server | None = None
    rabbit: RabbitNodes | None = None
    db: LocalServer | None = None  # the run's own MariaDB (mariadb-restore), None: the machine's
    galera: GaleraNodes | None = None  # --cluster: the Galera cluster behind the front DATABASE_URL names

    @property
    def servers(self) -> list[Server]:
        return [*([self.proxy] if self.proxy else []), *self.webs, *self.workers, self.beat]

    def wait_webs(self, timeout: float = 60) -> None:
        """Every running web instance listening and (behind HAProxy) UP in the proxy's view."""
        if self.proxy is None:
            processes.wait_port(self.port)
            return
        running = [i for i, web in enumerate(self.webs) if web.alive]
        for i in running:
            processes.wait_port(self.web_ports[i])
        deadline, seen = time.monotonic() + timeout, {}
        while time.monotonic() < deadline:
            seen = processes.proxy_servers(self.proxy)
            if all(seen.get(f"web{i + 1}") == "UP" for i in running):
                return
            time.sleep(0.2)
        raise RuntimeError(f"HAProxy does not see web instances {[i + 1 for i in running]} UP: {seen}")

    def start_workers(self, which: list[int] | None = None) -> None:
        """Start the workers `which` (all by default) that are not running, and
        wait until every worker's confirm consumers are up."""
        for i in range(len(self.workers)) if which is None else which:
            if not self.workers[i].alive:
                self.workers[i].start()
        self.wait_workers()

    def wait_workers(self, timeout: float = 90) -> None:
        """Until every partition has a live confirm consumer of every running
        worker: their beats in Redis, and on the broker cluster a consumer whose
        tag names the worker on every partition's queue (a restarted worker
        beats under its old name at once)."""
        alive = [name for name, w in zip(self.worker_names, self.workers) if w.alive]
        processes.wait_consuming(consumers=max(1, len(alive)))
        if self.rabbit is None:
            return
        from inventory.messages.queues import confirm_queue_name, partitions

        queues = [confirm_queue_name(k) for k in range(partitions())]
        deadline, have = time.monotonic() + timeout, {}
        while time.monotonic() < deadline:
            have = {q: {c["worker"] for c in self.rabbit.consumers(q, self.worker_names)} for q in queues}
            if all(set(alive) <= have[q] for q in queues):
                return
            time.sleep(0.5)
        raise RuntimeError(f"confirm consumers of {alive} not on every partition after {timeout:.0f} s: {have}")


def start_stack(port: int, server: str, rabbit: RabbitNodes | None) -> Stack:
    """One web tier (2 processes) on `port`, one worker and beat; with a
    RabbitMQ cluster (--cluster), as scripts/up --cluster runs them: two web
    instances (a process each, the same 2 in all) behind HAProxy on `port`,
    two workers (each partition: one active confirm consumer, one standby) and beat once."""
    if rabbit is None:
        return Stack(port, [processes.start_web(port, 2, log="chaos-web.log", server=server)],
                     [processes.start_worker(log="chaos-worker.log")], processes.start_beat(log="chaos-beat.log"))
    web_ports = [port + 1 + i for i in range(2)]
    webs = [processes.start_web(p, 1, extra={"SECKILL_TRUSTED_PROXIES": processes.PROXY_SOURCE},
                                log=f"chaos-web-{i}.log", server=server) for i, p in enumerate(web_ports, 1)]
    proxy = processes.start_proxy(port, web_ports, log="chaos-haproxy.log")
    names = [f"chaos{i}" for i in range(1, CLUSTER_WORKERS + 1)]
    workers = [processes.start_worker(log=f"chaos-worker-{i}.log", name=f"{n}@%h", wait=False)
               for i, n in enumerate(names, 1)]
    host = socket.gethostname()  # Celery's %h
    stack = Stack(port, webs, workers, processes.start_beat(log="chaos-beat.log"), web_ports=web_ports,
                  worker_names=[f"{n}@{host}" for n in names], proxy=proxy, rabbit=rabbit)
    stack.wait_workers()
    return stack
