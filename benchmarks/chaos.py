"""The fault matrix: sales through every fault and every pair of faults in sequence,
on the real servers, each judged by every unit and order in both stores.

    bash scripts/chaos [--quick] [--only worker-kill,redis-restart] [--list]
    bash scripts/chaos --cluster [--quick] [--cluster-base 7020] [--rabbitmq-base 5687] [--partitions 2]

Each run sells a fresh SKU to concurrent buyers (some clicking twice with the
same Idempotency-Key) while its faults land one right after the other, lets
the system drain (worker, beat sweeps), reconciles twice, then prints one row:

  attempted  requests sent           accepted   answered 202 (distinct orders)
  confirmed  202s that are orders    failed202  202s that ended FAILED
  lost       202s with no order      duplicated keys answered with two orders
  oversold   units beyond the stock  drift      Redis minus MySQL after reconciling
  in_flight  reservations in flight when a Redis loss landed
  drain_s    from the end of the load to everything confirmed
  pause_s    seconds from the Redis loss to the first sale after it, per SKU
             (the first new order answered to a request sent after the loss)
  n503       requests answered 503 after the Redis loss (after the first
             host fault, in a run of host faults with no Redis loss)
  confirm_gap_s  seconds from each fault to the first confirm in MySQL of an
             order created after it, the longest of the run's faults that
             landed while the load was running

After a Redis loss the SKU answers 503 until its snapshot is rebuilt, then
sells again by itself. When the load left no sale after the loss (it ended
during the pause, or while the worker was down), a second wave of fresh clicks
follows until the first 202 or a sold-out answer, so the pause is measured;
its orders are judged with the rest. A run is ok only with nothing lost,
oversold, FAILED after its 202 or twice ordered for one key, and no drift,
Redis loss or not.

--cluster runs the matrix on the local Redis Cluster of `bash scripts/cluster`
(base 7000, or SECKILL_REDIS_CLUSTER_BASE / --cluster-base; started when it is
not running), under a key prefix of its own (SECKILL_REDIS_PREFIX seckill-chaos:
the cluster is shared, nothing is flushed). The single-Redis losses
(redis-restart, -flushall, -rollback) are left out; the cluster's own faults
take their place, each aimed at the master serving the sale's SKUs:

  redis-master-kill   SIGKILL, until a replica is promoted; the node is started
                      again at the end of the run as scripts/cluster up does
                      (from its append-only file: it rejoins as a replica)
  redis-master-pause  SIGSTOP for 8 s, then SIGCONT (the cluster promotes a
                      replica meanwhile; the old master comes back as one)
  redis-failover      a planned CLUSTER FAILOVER on one of its synced replicas

Each sale there has four SKUs: two on the aimed master, one on each other
master (the master aimed at turns with the runs). Two more columns: node (the
master faulted > the one serving its slots after) and paused (SKUs whose first
sale after the loss took a second or more, of the sale's). pause_s is the
longest of the sale's. After every run the cluster is healed (every node back,
every replica in sync) and every fence passed before the next.

--cluster also runs everything else on several hosts' worth of processes, as
`bash scripts/up --cluster` does: a RabbitMQ cluster of its own (three nodes
from --rabbitmq-base, SECKILL_RABBITMQ_CLUSTER_BASE, else 5687: scripts/cluster.sh's
functions, started when not running; CELERY_BROKER_URL names its nodes), two
web instances (a process each) behind HAProxy (the config scripts/haproxy-config
writes; the load goes through the proxy), two workers (each partition of the
confirm stream: one active consumer, one standby) and beat once. The faults of
several hosts, each aimed at the confirm queue of the first SKU's partition:

  rabbitmq-node-kill     SIGKILL of the node holding that queue's leader
                         (rabbitmqctl list_queues name leader); started again
                         at the end of the run
  rabbitmq-node-restart  the node the queue's active consumer is connected to,
                         stopped cleanly (rabbitmqctl shutdown) and started again
                         at once, mid-sale
  web-host-kill          SIGKILL of one web instance's process group (the two in
                         turn); the other serves the rest, it is started again
                         at the end of the run
  worker-active-kill     SIGKILL of the worker whose consumer is active on the
                         queue (rabbitmqctl list_consumers: the tags name the
                         workers); the standby takes over, the killed one is
                         started again at the end of the run

There worker-kill and worker-down act on both workers (no consumer at all),
web-kill on every web process of both instances (their servers start new
ones); rabbitmq-restart (of the machine's one broker) is left out, its runs
take rabbitmq-node-restart. The node column also says what each host fault
hit (mq5688>5687: node 5688, the leader, killed, 5687 leads after; mq5688~:
restarted; web2; chaos1>chaos2: chaos1's worker killed, chaos2's consumer
active after). Before a second RabbitMQ node fault of a run the first node is
started again (two nodes down of three is a lost majority); after every run
every node, instance and worker is back.

--partitions N sets SECKILL_CONFIRM_PARTITIONS of every process (1 by default).

The last line is a key=value summary ending in verdict=ok|FAIL (with
broker=single:5672|cluster:<base>, partitions= and the confirm gap's median and
max over the runs, confirm_gap_s_median= / confirm_gap_s_max=). It acts on the
machine's own Redis, RabbitMQ and MariaDB (and, with --cluster, on the nodes of
that cluster): run it alone.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import signal
import socket
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import faults, harness  # noqa: E402
from benchmarks.harness import HOST, progress, say  # noqa: E402

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
}


def configure(cluster: faults.Cluster | None, rabbit: faults.RabbitCluster | None = None,
              partitions: int = 1) -> None:
    """The run's own stores: Redis db 6 of the single Redis, or its own prefix
    on the cluster; the machine's RabbitMQ, or the RabbitMQ cluster's nodes;
    the confirm stream in `partitions` (every process started inherits it)."""
    extra = dict(EXTRA_ENV, SECKILL_CONFIRM_PARTITIONS=str(partitions))
    if rabbit is not None:
        extra["CELERY_BROKER_URL"] = rabbit.url
    if cluster is None:
        harness.configure(db_name=DB_NAME, redis_db=REDIS_DB, queue=QUEUE, extra_env=extra)
    else:
        harness.configure(db_name=DB_NAME, redis_db=0, queue=QUEUE, extra_env=extra,
                          redis_url=cluster.url, redis_prefix=CLUSTER_PREFIX)


from benchmarks import loadgen  # noqa: E402

# The clock loadgen stamps Result.started / .finished with: loss moments are
# taken on it too, so the two compare.
clock = time.perf_counter


@dataclass
class Stack:
    port: int                      # where the load goes: the web tier, or HAProxy in front of the instances
    webs: list[harness.Server]     # one web tier, or (--cluster) two instances behind HAProxy
    workers: list[harness.Server]  # one worker, or (--cluster) two: one active confirm consumer, one standby
    beat: harness.Server
    web_ports: list[int] = field(default_factory=list)
    worker_names: list[str] = field(default_factory=list)  # their Celery node names, as their consumer tags begin
    proxy: harness.Server | None = None
    rabbit: faults.RabbitCluster | None = None

    @property
    def servers(self) -> list[harness.Server]:
        return [*([self.proxy] if self.proxy else []), *self.webs, *self.workers, self.beat]

    def wait_webs(self, timeout: float = 60) -> None:
        """Every running web instance listening and (behind HAProxy) UP in the proxy's view."""
        if self.proxy is None:
            harness.wait_port(self.port)
            return
        running = [i for i, web in enumerate(self.webs) if web.alive]
        for i in running:
            harness.wait_port(self.web_ports[i])
        deadline, seen = time.monotonic() + timeout, {}
        while time.monotonic() < deadline:
            seen = harness.proxy_servers(self.proxy)
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
        harness.wait_consuming(consumers=max(1, len(alive)))
        if self.rabbit is None:
            return
        from inventory import messages

        queues = [messages.confirm_queue_name(k) for k in range(messages.partitions())]
        deadline, have = time.monotonic() + timeout, {}
        while time.monotonic() < deadline:
            have = {q: {c["worker"] for c in self.rabbit.consumers(q, self.worker_names)} for q in queues}
            if all(set(alive) <= have[q] for q in queues):
                return
            time.sleep(0.5)
        raise RuntimeError(f"confirm consumers of {alive} not on every partition after {timeout:.0f} s: {have}")


@dataclass
class Context:
    stack: Stack
    skus: list[str]   # the sale's SKUs; the first `aimed` of them on the node the Redis faults aim at
    aimed: int = 1
    cluster: faults.Cluster | None = None
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

    @property
    def sku_id(self) -> str:
        return self.skus[0]

    def mark(self) -> None:
        """The fault lands now (the confirm gap is measured from here)."""
        self.struck.append(time.time())

    @property
    def queue(self) -> str:
        """The confirm queue of the aimed SKU's partition (the one the host faults aim at)."""
        from inventory import messages

        return messages.confirm_queue_name(messages.partition_of(self.sku_id))


def _inflight(sku_ids: list[str]) -> int:
    from core.redis import RedisError
    from inventory.redis import live as redis_live

    n = 0
    for sku_id in sku_ids:
        try:
            live = redis_live.live_stock(sku_id=sku_id)
            n += live.inflight if live else 0
        except RedisError:
            pass
    return n


# --- the faults -------------------------------------------------------------------------
# Each lands mid-sale and returns once the system is whole again (a killed
# process restarted, a server back); worker-down instead stops the worker before
# the sale starts and starts it after.

def worker_kill(ctx: Context) -> None:
    """SIGKILL of every worker at once (both on --cluster: no confirm consumer
    at all for a moment), started again half a second later."""
    ctx.mark()
    ctx.done.append("worker-kill")
    for worker in ctx.stack.workers:
        worker.kill()
    time.sleep(0.5)
    ctx.stack.start_workers()


def rabbitmq_restart(ctx: Context) -> None:
    faults.rabbitmq_restart(down_s=1.0)


def _redis_loss(ctx: Context, lose: Callable[[], None]) -> None:
    """Note what is in flight, lose every Redis key, note the moment they were gone."""
    ctx.inflight_at_loss.append(_inflight(ctx.skus[:ctx.aimed]))
    ctx.redis_loss = True
    lose()
    ctx.losses.append(clock())


def redis_restart(ctx: Context) -> None:
    """Redis stopped without saving and started again empty (the loss is the stop)."""
    _redis_loss(ctx, faults.redis_stop)
    time.sleep(0.5)
    faults.redis_start_empty()


def redis_rollback(ctx: Context) -> None:
    """Redis saves a file, sells on a moment, is killed and comes back from that
    file: data older than what it lost (a failover to a lagging replica)."""
    path = faults.redis_save_snapshot()
    time.sleep(0.1)  # short: at 48 connections the sale would sell out before the kill
    _redis_loss(ctx, faults.redis_stop)
    faults.redis_start_from(path)


def redis_flushall(ctx: Context) -> None:
    """FLUSHALL mid-sale: every key gone, the server up all along."""
    _redis_loss(ctx, faults.redis_flushall)


def mariadb_restart(ctx: Context) -> None:
    faults.mariadb_restart(down_s=2.0)


def web_kill(ctx: Context) -> None:
    """SIGKILL every web worker process at once: requests between their reserve
    and their publish die with them (the server's main process starts new ones;
    connections wait on its socket meanwhile)."""
    ctx.mark()
    for web in ctx.stack.webs:  # on --cluster: of both instances (web-host-kill takes one whole)
        if not web.alive:
            continue
        for pid in web.children():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    ctx.stack.wait_webs()


def worker_down(ctx: Context) -> None:
    """Placeholder: the worker is stopped for the whole sale (see before/after)."""


# The cluster's own faults, each on the master serving the sale's aimed SKUs
# now. Each returns once their slots are served again (a replica promoted, the
# paused node resumed); the cluster is made whole (every node running, every
# replica in sync: scripts/cluster up) at the end of the run, and before a
# second node fault of the same run, which then meets a whole shard too.
# The loss is the moment the master stopped serving.

def _aimed_master(ctx: Context) -> int:
    assert ctx.cluster is not None, "a cluster fault needs --cluster"
    if ctx.nodes:
        ctx.cluster.up()
    port = ctx.cluster.slot_master(ctx.slot)
    if port is None:
        raise RuntimeError(f"no master serves slot {ctx.slot}")
    return port


def redis_master_kill(ctx: Context) -> None:
    """SIGKILL of the master serving the sale's SKUs, until a replica took over.

    The node is started again at the end of the run as scripts/cluster up does
    (from its append-only file): it rejoins as a replica of its successor."""
    cluster, port = ctx.cluster, _aimed_master(ctx)
    _redis_loss(ctx, lambda: cluster.kill(port))
    ctx.nodes.append(f"{port}>{cluster.wait_promoted(ctx.slot, port)}")


def redis_master_pause(ctx: Context) -> None:
    """SIGSTOP of the master serving the sale's SKUs for 8 s, then SIGCONT.

    The cluster promotes a replica meanwhile (node timeout 2 s); the old master
    finds itself demoted when it resumes and syncs from its successor."""
    cluster, port = ctx.cluster, _aimed_master(ctx)
    _redis_loss(ctx, lambda: cluster.signal(port, signal.SIGSTOP))
    try:
        time.sleep(faults.CLUSTER_PAUSE_S)
    finally:
        cluster.signal(port, signal.SIGCONT)
    ctx.nodes.append(f"{port}>?")  # its successor is known once the cluster settled (heal_after)


def redis_failover(ctx: Context) -> None:
    """A planned CLUSTER FAILOVER on a synced replica of the master serving the sale's SKUs."""
    cluster, port = ctx.cluster, _aimed_master(ctx)
    replica = cluster.synced_replica(port)
    _redis_loss(ctx, lambda: cluster.failover(replica))
    ctx.nodes.append(f"{port}>{replica}")


# The faults of several hosts (issue 21), on --cluster only: the RabbitMQ
# cluster's nodes, one of the two web instances behind HAProxy, the worker
# whose confirm consumer is active. Each is aimed at the confirm queue of the
# sale's first SKU's partition; what it hit goes into the node column:
#   mq5688>5687   node 5688 (that queue's leader) killed, 5687 leads it after
#   mq5688~       node 5688 stopped cleanly and started again
#   web2          web instance 2 killed (the other serves the rest of the sale)
#   chaos1>chaos2 the worker of the active consumer killed, chaos2's consumer active after
# A RabbitMQ node, web instance or worker left down is started again at the end
# of the run (before a second RabbitMQ node fault of the same run, the killed
# node is started again first: two nodes down of three is a lost majority).

def _broker(ctx: Context) -> faults.RabbitCluster:
    rabbit = ctx.stack.rabbit
    assert rabbit is not None, "a RabbitMQ node fault needs --cluster"
    if ctx.broker_down:
        rabbit.up()
        ctx.broker_down = False
    return rabbit


# What moves each target: the queue's leader and the active consumer's node
# move with a RabbitMQ node fault, the active consumer also with a worker's.
_MOVED_BY = {"leader": ("rabbitmq-",), "consumer_node": ("rabbitmq-", "worker-"), "active": ("rabbitmq-", "worker-")}


def _looked_up(ctx: Context, what: str, find: Callable[[], object]):
    """The target looked up before the sale (a rabbitmqctl call takes a second
    or two here, and the sale about three), unless an earlier fault of the run
    may have moved it: then looked up now."""
    moved = any(host.startswith(_MOVED_BY[what]) for host in ctx.done)
    if what in ctx.targets and not moved:
        return ctx.targets[what]
    return find()


def _active(ctx: Context) -> dict | None:
    """The active consumer of the aimed queue: {"worker", "node", ...}, None when none is."""
    rabbit = ctx.stack.rabbit
    return next((c for c in rabbit.consumers(ctx.queue, ctx.stack.worker_names) if c["active"]), None)


def _consumer_node(ctx: Context) -> int:
    """The node the aimed queue's active consumer is connected to (its leader when none is active)."""
    active = _active(ctx)
    return active["node"] if active and active["node"] else ctx.stack.rabbit.leader(ctx.queue)


def rabbitmq_node_kill(ctx: Context) -> None:
    """SIGKILL of the RabbitMQ node holding the leader of the sale's confirm
    queue; another is elected. The node is started again at the end of the run."""
    rabbit = _broker(ctx)
    leader = _looked_up(ctx, "leader", lambda: rabbit.leader(ctx.queue))
    ctx.mark()
    rabbit.kill(leader)
    ctx.broker_down = True
    ctx.done.append("rabbitmq-node-kill")

    def after() -> str:  # the leader once the run is over (not waited for here: the next fault lands meanwhile)
        try:
            now = rabbit.leader(ctx.queue)
        except RuntimeError:
            now = None
        return f"mq{leader}>{now if now and now != leader else '?'}"

    ctx.later.append((len(ctx.hosts), after))
    ctx.hosts.append(f"mq{leader}>")


def rabbitmq_node_restart(ctx: Context) -> None:
    """A RabbitMQ node stopped cleanly (rabbitmqctl shutdown) and started again
    at once: the node the sale's active confirm consumer is connected to."""
    rabbit = _broker(ctx)
    port = _looked_up(ctx, "consumer_node", lambda: _consumer_node(ctx))
    ctx.mark()
    rabbit.stop(port)
    ctx.broker_down = True
    ctx.done.append("rabbitmq-node-restart")
    rabbit.up()
    ctx.broker_down = False
    ctx.hosts.append(f"mq{port}~")


def web_host_kill(ctx: Context) -> None:
    """SIGKILL of one of the two web instances behind HAProxy, its whole
    process group (the instances in turn, by run); the other serves the rest of
    the sale, the killed one is started again at the end of the run."""
    stack = ctx.stack
    assert stack.proxy is not None, "web-host-kill needs --cluster (two instances behind HAProxy)"
    running = [i for i, web in enumerate(stack.webs) if web.alive]
    i = running[ctx.run_index % len(running)]
    ctx.mark()
    stack.webs[i].kill()
    ctx.webs_down.append(i)
    ctx.done.append("web-host-kill")
    ctx.hosts.append(f"web{i + 1}")


def worker_active_kill(ctx: Context) -> None:
    """SIGKILL of the worker whose confirm consumer is active on the sale's
    queue (rabbitmqctl list_consumers: the tag names the worker); the standby's
    consumer takes over. The killed worker is started again at the end of the run."""
    stack = ctx.stack
    active = _looked_up(ctx, "active", lambda: _active(ctx))
    if active is None or active["worker"] not in stack.worker_names:
        raise RuntimeError(f"no active consumer of a worker on {ctx.queue}: {active}")
    i = stack.worker_names.index(active["worker"])
    ctx.mark()
    stack.workers[i].kill()
    ctx.workers_down.append(i)
    ctx.done.append("worker-active-kill")
    short = [name.split("@")[0] for name in stack.worker_names]

    def after() -> str:  # the active consumer once the run is over, before the killed worker is back
        try:
            now = _active(ctx)
        except RuntimeError:
            now = None
        taken = now and now["worker"] in stack.worker_names and now["worker"] != active["worker"]
        return f"{short[i]}>{short[stack.worker_names.index(now['worker'])] if taken else '?'}"

    ctx.later.append((len(ctx.hosts), after))
    ctx.hosts.append(f"{short[i]}>")


def look_up_targets(ctx: Context, names: tuple[str, ...]) -> None:
    """Before the sale: the aimed queue's leader and active consumer, for the
    run's host faults (a rabbitmqctl call takes a second or two here)."""
    if "rabbitmq-node-kill" in names:
        ctx.targets["leader"] = ctx.stack.rabbit.leader(ctx.queue)
    if "rabbitmq-node-restart" in names:
        ctx.targets["consumer_node"] = _consumer_node(ctx)
    if "worker-active-kill" in names:
        ctx.targets["active"] = _active(ctx)


def heal_hosts(ctx: Context) -> None:
    """Every RabbitMQ node, web instance and worker a fault left down started
    again (the broker first: the others connect to it), and waited for."""
    stack = ctx.stack
    for i, what in ctx.later:
        ctx.hosts[i] = what()
    ctx.later.clear()
    if stack.rabbit is not None and (ctx.broker_down or len(stack.rabbit.running()) < len(stack.rabbit.ports)):
        stack.rabbit.up()
        ctx.broker_down = False
    if any(not w.alive for w in stack.workers):
        stack.start_workers()
    ctx.workers_down.clear()
    for web in stack.webs:
        if not web.alive:
            web.start()
    ctx.webs_down.clear()
    stack.wait_webs()


def heal_after(ctx: Context, timeout: float = 90) -> str:
    """The end of a cluster run: the cluster whole (a killed node started again
    rejoins as a replica, every replica in sync) and every fence passed (the
    confirm consumer sends them), so the next run starts on a whole cluster.
    Returns a note when a fence still stands after `timeout`."""
    from core.redis import RedisError
    from inventory.redis import snapshots

    cluster = ctx.cluster
    cluster.up()
    heal_hosts(ctx)
    for i, node in enumerate(ctx.nodes):
        if node.endswith(">?"):  # a pause: the master that serves the slot now, the old one if none took over
            port, now = node[:-2], cluster.slot_master(ctx.slot)
            ctx.nodes[i] = port if str(now) == port else f"{port}>{now}"
    deadline = time.monotonic() + timeout
    standing: dict = {}
    while time.monotonic() < deadline:
        try:
            standing = snapshots.fences_listed()
        except RedisError:
            standing = {"?": 0}
        if not standing:
            return ""
        time.sleep(0.2)
    return f"fences still standing after {timeout:.0f} s: {', '.join(sorted(standing))[:120]}"


FAULTS: dict[str, Callable[[Context], None]] = {
    "worker-kill": worker_kill,
    "rabbitmq-restart": rabbitmq_restart,
    "redis-restart": redis_restart,
    "redis-flushall": redis_flushall,
    "redis-rollback": redis_rollback,
    "mariadb-restart": mariadb_restart,
    "web-kill": web_kill,
    "worker-down": worker_down,
    "redis-master-kill": redis_master_kill,
    "redis-master-pause": redis_master_pause,
    "redis-failover": redis_failover,
    "rabbitmq-node-kill": rabbitmq_node_kill,
    "rabbitmq-node-restart": rabbitmq_node_restart,
    "web-host-kill": web_host_kill,
    "worker-active-kill": worker_active_kill,
}
# The one Redis's losses, which a cluster does not have (its nodes are lost one
# at a time: the cluster faults); and those, which one Redis does not have.
SINGLE_REDIS_FAULTS = ("redis-restart", "redis-flushall", "redis-rollback")
CLUSTER_FAULTS = ("redis-master-kill", "redis-master-pause", "redis-failover")
# The faults of several hosts (--cluster only, on its RabbitMQ cluster, two web
# instances and two workers); the one broker's restart is left out there (the
# cluster has no single broker: rabbitmq-node-restart takes its place).
HOST_FAULTS = ("rabbitmq-node-kill", "rabbitmq-node-restart", "web-host-kill", "worker-active-kill")
SINGLE_BROKER_FAULTS = ("rabbitmq-restart",)


def fault_names(cluster: bool) -> list[str]:
    """The faults of the matrix on this kind of Redis, in the order the plan pairs them."""
    skip = SINGLE_REDIS_FAULTS + SINGLE_BROKER_FAULTS if cluster else CLUSTER_FAULTS + HOST_FAULTS
    return [name for name in FAULTS if name not in skip]


# --- one run ------------------------------------------------------------------------------

@dataclass
class Row:
    name: str
    attempted: int = 0
    accepted: int = 0
    confirmed: int = 0
    failed202: int = 0
    lost: int = 0
    duplicated: int = 0
    oversold: int = 0
    drift: int | None = None
    in_flight: str = "-"
    drain_s: float = 0.0
    pause_s: float | None = None
    n503: int | None = None
    node: str = "-"
    paused: str = "-"
    confirm_gap_s: float | None = None
    ok: bool = True
    note: str = ""
    redis_loss: bool = False
    faults: tuple[str, ...] = ()


# (token, Idempotency-Key, SKU) per request
Job = tuple[str, str, str]


def fresh_clicks(tokens: list[str], n: int, rnd: random.Random, skus: list[str]) -> list[Job]:
    """(token, new key, SKU) per request, the SKUs in turn."""
    return [(rnd.choice(tokens), uuid.uuid4().hex, skus[i % len(skus)]) for i in range(n)]


def clicks(tokens: list[str], n: int, seed: int, skus: list[str]) -> list[Job]:
    """(token, key, SKU) per request; one in ten is sent again later (a retry)."""
    rnd = random.Random(seed)
    first = fresh_clicks(tokens, n, rnd, skus)
    out = list(first)
    for job in rnd.sample(first, n // 10):
        out.insert(rnd.randrange(len(out) // 2, len(out) + 1), job)
    return out


# The second wave: two connections, a click each every WAVE_GAP_S, for up to WAVE_S.
WAVE_CLICKS, WAVE_GAP_S, WAVE_S = 300, 0.2, 30.0
# A SKU whose first sale after a loss took this long paused (the paused column);
# sales that merely queued behind others take less.
PAUSED_S = 1.0


def _body(r: loadgen.Result) -> dict:
    try:
        return json.loads(r.body)
    except ValueError:
        return {}


def _sold_out(r: loadgen.Result) -> bool:
    return r.status == 409 and _body(r).get("code") == "sold_out"


def first_sale_after(results: list[loadgen.Result], moment: float, of: Callable[[loadgen.Result], bool]
                     = lambda r: True) -> float | None:
    """Seconds from `moment` to the first new order (a 202 that is no replay)
    answered to a request sent after it (of those `of` picks); None when there was none."""
    done = [r.finished for r in results
            if r.status == 202 and r.started > moment and of(r) and not _body(r).get("replayed")]
    return min(done) - moment if done else None


def second_wave(port: int, tokens: list[str], jobs: list[Job], make: loadgen.MakeRequest,
                seed: int, skus: list[str]) -> list[loadgen.Result]:
    """Fresh clicks (new keys, the same buyers), paced, until the first 202, a
    sold-out answer or WAVE_S, on each of the SKUs at once (a wave each).
    `jobs` grows by them and their results' indexes point into it, like the load's."""
    bases = []
    for i, sku in enumerate(skus):
        bases.append(len(jobs))
        jobs.extend(fresh_clicks(tokens, WAVE_CLICKS, random.Random(seed + i), [sku]))
    out: list[loadgen.Result] = []

    def wave(base: int) -> None:
        results = loadgen.run(host=HOST, port=port, concurrency=2, make_request=lambda i: make(base + i),
                              total_requests=WAVE_CLICKS, duration_s=WAVE_S, timeout_s=10, gap_s=WAVE_GAP_S,
                              stop_when=lambda r: r.status == 202 or _sold_out(r))
        for r in results:
            r.index += base
        out.extend(results)

    threads = [threading.Thread(target=wave, args=(base,)) for base in bases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def measure_pause(row: Row, ctx: Context, results: list[loadgen.Result], jobs: list[Job],
                  wave: Callable[[list[str]], list[loadgen.Result]]) -> None:
    """pause_s, n503 (and on a cluster paused) of a Redis-loss run. Each SKU
    the load left no sale after the (last) loss gets a second wave, whose
    results join `results` first."""
    moment = ctx.losses[-1]

    def pauses() -> dict[str, float | None]:
        return {sku: first_sale_after(results, moment, lambda r, sku=sku: jobs[r.index][2] == sku)
                for sku in ctx.skus}

    found = pauses()
    if any(p is None for p in found.values()):
        progress(f"{row.name}: a second wave, {clock() - moment:.1f} s after the loss")
        results.extend(wave([sku for sku, p in found.items() if p is None]))
        found = pauses()
    progress(f"{row.name}: pause per SKU " + " ".join("-" if p is None else f"{p:.1f}" for p in found.values()))
    measured = [p for p in found.values() if p is not None]
    row.pause_s = max(measured) if measured else None
    row.n503 = sum(1 for r in results if r.status == 503 and r.finished > ctx.losses[0])
    notes = []
    for sku, p in found.items():
        if p is None:
            sold_out = any(_sold_out(r) for r in results if r.finished > moment and jobs[r.index][2] == sku)
            if sold_out and sku not in ctx.skus[:ctx.aimed]:
                continue  # a SKU of another master sold out while the aimed ones paused: as it should
            what = "sold out" if sold_out else f"none within the {WAVE_S:.0f} s wave"
            notes.append(f"no sale after the loss: {what}" + (f" ({sku})" if len(ctx.skus) > 1 else ""))
    if ctx.cluster is not None:
        paused = {sku for sku, p in found.items() if p is not None and p >= PAUSED_S}
        row.paused = f"{len(paused)}/{len(ctx.skus)}"
        elsewhere = paused - set(ctx.skus[:ctx.aimed])
        # (a web kill pauses every SKU while it restarts, a RabbitMQ node lost every SKU's publishes)
        if elsewhere and not set(row.faults) & {"web-kill", "web-host-kill", "rabbitmq-node-kill",
                                                  "rabbitmq-node-restart"}:
            notes.append(f"paused on another master: {', '.join(sorted(elsewhere))} "
                         f"({', '.join(f'{found[s]:.1f}' for s in sorted(elsewhere))} s)")
    row.note = "; ".join(notes)


def sale_skus(cluster: faults.Cluster | None, stock: int, run_index: int) -> tuple[list[str], int]:
    """The SKUs of one sale and how many of them the Redis faults aim at (the
    first ones): one SKU on the single Redis; on a cluster two on one master
    (the run's turn) and one on each other master."""
    if cluster is None:
        return [harness.new_sku(stock, limit=4, prefix="CHAOS")], 1
    from redis.crc import key_slot

    from inventory.redis.keys import sku_keys

    layout = cluster.layout()
    masters = list(dict.fromkeys(port for _, _, port in layout))
    aimed = masters[run_index % len(masters)]
    want = {aimed: 2, **{m: 1 for m in masters if m != aimed}}
    chosen: dict[int, list[str]] = {m: [] for m in masters}
    while any(len(chosen[m]) < n for m, n in want.items()):
        sku_id = f"CHAOS-{uuid.uuid4().hex[:8]}"
        slot = key_slot(sku_keys(sku_id).stock.encode())
        owner = next(port for start, end, port in layout if start <= slot <= end)
        if len(chosen[owner]) < want[owner]:
            chosen[owner].append(sku_id)
    ordered = chosen[aimed] + [s for m in masters if m != aimed for s in chosen[m]]
    return [harness.new_sku(stock, limit=4, sku_id=s) for s in ordered], want[aimed]


def confirm_gap(skus: list[str], moments: list[float]) -> float | None:
    """Seconds from each fault to the first confirm of an order created after
    it (an order MySQL has as confirmed: confirmed_at set), the longest of the
    run's faults; None when no order was created after any of them."""
    from datetime import datetime, timezone

    from django.db.models import Min

    from orders.models import Order

    gaps = []
    for moment in moments:
        at = datetime.fromtimestamp(moment, tz=timezone.utc)
        first = Order.objects.filter(sku_id__in=skus, created_at__gt=at, confirmed_at__isnull=False).aggregate(
            t=Min("confirmed_at"))["t"]
        if first is not None:
            gaps.append((first - at).total_seconds())
    return max(gaps) if gaps else None


def run_once(stack: Stack, tokens: list[str], names: tuple[str, ...], *, stock: int, demand: int,
             concurrency: int, cluster: faults.Cluster | None = None, run_index: int = 0) -> Row:
    from django.db import close_old_connections
    from redis.crc import key_slot

    from reconciliation.services import ReconciliationBusy, reconciliation_run

    row = Row(" + ".join(names), faults=names)
    skus, aimed = sale_skus(cluster, stock, run_index)
    from inventory.redis.keys import sku_keys

    ctx = Context(stack, skus, aimed=aimed, cluster=cluster, slot=key_slot(sku_keys(skus[0]).stock.encode()),
                  run_index=run_index)
    if stack.rabbit is not None:
        look_up_targets(ctx, names)
    seed = hash(row.name) & 0xFFFF
    jobs = clicks(tokens, demand, seed=seed, skus=skus)
    bodies = {sku: json.dumps({"sku_id": sku, "quantity": 1}).encode() for sku in skus}

    def make(i: int):
        token, key, sku = jobs[i]
        return ("POST", "/api/v1/orders", {"Authorization": f"Token {token}", "Content-Type": "application/json",
                                           "Idempotency-Key": key}, bodies[sku])

    down_all_sale = "worker-down" in names
    if down_all_sale:
        for worker in stack.workers:
            worker.stop()
    results: list = []
    load = threading.Thread(target=lambda: results.extend(loadgen.run(
        host=HOST, port=stack.port, concurrency=concurrency, make_request=make, total_requests=len(jobs),
        timeout_s=30)))
    load.start()
    load_began, began = clock(), time.time()  # (the faults' moments are time.time(): the confirm gap)
    # the faults land one right after the other, from about a quarter into the sale
    from core.redis import RedisError
    from inventory.redis import gate, live as redis_live

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            live = redis_live.live_stock(sku_id=ctx.sku_id)
            if live and live.available <= stock * 3 // 4:
                break
        except RedisError:
            pass
        time.sleep(0.02)
    for name in names:
        progress(f"{row.name}: {name}, {clock() - load_began:.1f} s into the load")
        struck, before = len(ctx.struck), time.time()
        FAULTS[name](ctx)
        if len(ctx.struck) == struck:  # a fault that marks no moment of its own landed when it was called
            ctx.struck.append(before)
        close_old_connections()
        if ctx.losses:
            progress(f"{row.name}: {name} over, {clock() - ctx.losses[0]:.1f} s after the loss")
    load.join()
    load_over = time.time()
    progress(f"{row.name}: load over after {clock() - load_began:.1f} s")
    if ctx.losses:
        progress(f"{row.name}: load over, {clock() - ctx.losses[0]:.1f} s after the loss")
    if down_all_sale:
        stack.start_workers()
    if ctx.losses:
        measure_pause(row, ctx, results, jobs,
                      lambda wave_skus: second_wave(stack.port, tokens, jobs, make, seed + 1, wave_skus))
    elif set(names) & set(HOST_FAULTS) and ctx.struck:  # no Redis loss: the 503s after the (first) host fault
        row.n503 = sum(1 for r in results if r.status == 503 and r.finished > load_began + (ctx.struck[0] - began))
    last_fault = time.monotonic()

    # --- judge -------------------------------------------------------------------------
    from orders.models import Order

    by_click: dict[tuple[str, str], set[str]] = {}
    accepted_of: dict[str, set[str]] = {sku: set() for sku in skus}
    for r in results:
        if r.status == 202:
            order_id = _body(r)["order_id"]
            by_click.setdefault(jobs[r.index][:2], set()).add(order_id)
            accepted_of[jobs[r.index][2]].add(order_id)
    accepted = set().union(*by_click.values()) if by_click else set()
    row.attempted, row.accepted = len(results), len(accepted)
    row.duplicated = sum(1 for ids in by_click.values() if len(ids) > 1)

    def drained() -> bool:
        close_old_connections()
        try:
            if any(gate.inflight_entries(sku_id=sku) for sku in skus):
                return False
        except RedisError:
            return False
        return Order.objects.filter(pk__in=accepted).count() == len(accepted)

    wait_until = time.monotonic() + 180
    while time.monotonic() < wait_until and not drained():
        time.sleep(0.2)
    row.drain_s = time.monotonic() - last_fault
    for _ in range(2):
        for _attempt in range(20):
            try:
                reconciliation_run(trigger="command", observe_gap_s=0.2, sku_ids=skus)
                break
            except ReconciliationBusy:
                time.sleep(0.5)
    balances = [harness.balance(sku, stock, accepted_of[sku]) for sku in skus]
    row.confirmed = sum(b.confirmed for b in balances)
    row.failed202 = sum(b.failed_after_202 for b in balances)
    row.lost = sum(b.lost for b in balances)
    row.oversold = sum(b.oversold for b in balances)
    drifts = [b.drift for b in balances if b.drift is not None]
    row.drift = (drifts[0] if len(skus) == 1 else sum(abs(d) for d in drifts)) if drifts else None
    # (Orders with no 202 behind them are requests interrupted by a kill: their
    # clients got no answer, a retry with the key gets the order. Not duplicates.)
    if ctx.inflight_at_loss:
        row.in_flight = "/".join(str(n) for n in ctx.inflight_at_loss)
    # (a fault that landed once the load was over, after a slow one, has no clicks behind it:
    # its "next order" would be the second wave's, whenever that came)
    row.confirm_gap_s = confirm_gap(skus, [t for t in ctx.struck if t < load_over])
    left = heal_after(ctx) if cluster is not None else ""
    if ctx.nodes or ctx.hosts:
        row.node = ",".join(ctx.nodes + ctx.hosts)
    # Redis loss or not: nothing fails after its 202 and no key gets two orders.
    row.redis_loss = ctx.redis_loss
    # After a loss each SKU must sell again by itself (or answer sold out from its rebuilt snapshot).
    sells_again = not ctx.losses or "none within" not in row.note
    balanced = all(b.balanced for b in balances)
    row.ok = (balanced and row.lost == 0 and row.oversold == 0 and row.drift in (0, None)
              and row.failed202 == 0 and row.duplicated == 0 and sells_again)
    if not balanced:
        row.note = "; ".join(filter(None, ("buckets do not add up", row.note)))
    n500 = sum(1 for r in results if r.status == 500)
    if n500:  # no promise broken (no 202), but no answer the API documents either: see the web log
        row.note = "; ".join(filter(None, (row.note, f"{n500} answered 500")))
    n502 = sum(1 for r in results if r.status in (502, 504))
    if n502:  # HAProxy's answer to a request whose instance died under it (outcome unknown: retry with the key)
        row.note = "; ".join(filter(None, (row.note, f"{n502} answered 502/504 by the proxy")))
    if left:  # the cluster not whole, or a fence standing: the next run would start on it
        row.ok, row.note = False, "; ".join(filter(None, (row.note, left)))
    return row


# Redis losses every plan holds (when their faults are chosen): alone, while the
# worker is down for the whole sale, and just before and after a worker kill.
LOSS_RUNS = [("redis-flushall",), ("redis-restart",), ("redis-rollback",), ("worker-down", "redis-restart"),
             ("redis-restart", "worker-kill"), ("worker-kill", "redis-flushall"), ("redis-rollback", "web-kill")]
# On a cluster: each node fault alone and followed by a worker kill, a web kill
# and a RabbitMQ restart, one with the worker down for the whole sale, and a
# worker kill just before a kill (the RabbitMQ restarts last: they reach every
# other user of the machine's broker).
CLUSTER_LOSS_RUNS = (
    [(f,) for f in CLUSTER_FAULTS]
    + [(f, p) for p in ("worker-kill", "web-kill") for f in CLUSTER_FAULTS]
    + [("worker-down", "redis-master-kill"), ("worker-kill", "redis-master-kill")]
    + [(f, "rabbitmq-node-restart") for f in CLUSTER_FAULTS]
)
# The faults of several hosts: each alone, each with a Redis master kill (after
# it; the node restart before it, since the restart takes the whole ~3.5 s load
# and a kill after it would meet a sale already over), and three pairs of them
# (the broker's faults last: the slower to land).
HOST_RUNS = (
    [(f,) for f in HOST_FAULTS]
    + [(f, "redis-master-kill") if f != "rabbitmq-node-restart" else ("redis-master-kill", f) for f in HOST_FAULTS]
    + [("worker-active-kill", "rabbitmq-node-kill"), ("web-host-kill", "rabbitmq-node-restart"),
       ("rabbitmq-node-kill", "worker-active-kill")]
)
# The other faults the cluster's quick plan runs alone (as a control: the same
# faults as on one Redis, now with the gate sharded). MariaDB's restart and
# RabbitMQ's alone stay in the full plan: neither meets a Redis node.
CLUSTER_QUICK_ALONE = ("worker-kill", "web-kill")


def plan(only: list[str] | None, quick: bool, cluster: bool = False) -> list[tuple[str, ...]]:
    names = only or fault_names(cluster)
    singles = [(n,) for n in names]
    # worker-down first or not at all, and never with worker-active-kill (no worker is active then)
    pairs = [p for p in itertools.permutations(names, 2)
             if "worker-down" not in p or (p[0] == "worker-down" and "worker-active-kill" not in p)]
    if cluster:
        losses = [run for run in CLUSTER_LOSS_RUNS + HOST_RUNS if set(run) <= set(names)]
        if quick:
            return list(dict.fromkeys([s for s in singles if s[0] in CLUSTER_QUICK_ALONE] + losses))
        return list(dict.fromkeys(singles + losses + pairs))
    if quick:
        pairs = pairs[:: max(1, len(pairs) // 6)][:6]
    losses = [run for run in LOSS_RUNS if set(run) <= set(names)]
    return list(dict.fromkeys(singles + pairs + losses))


COLUMNS = ("attempted", "accepted", "confirmed", "failed202", "lost", "duplicated", "oversold", "drift",
           "in_flight", "drain_s", "pause_s", "n503", "confirm_gap_s")
CLUSTER_COLUMNS = COLUMNS + ("node", "paused")


def width(column: str) -> int:
    return max(10, len(column))


def cell(row: Row, column: str) -> str:
    """One table cell, ten wide (or its header's width): seconds to one decimal, "-" for nothing."""
    value, w = getattr(row, column), width(column)
    if value is None:
        return f"{'-':>{w}}"
    return f"{value:>{w}.1f}" if isinstance(value, float) else f"{str(value):>{w}}"


def _figure_of(rows: list[Row], name: str, value: Callable[[Row], float | None], what: str) -> str:
    """A fault's figure over the runs it was in: median and max, and alone."""
    figures = [value(r) for r in rows if value(r) is not None]
    text = (f"median {statistics.median(figures):.1f} s, max {max(figures):.1f} s" if figures
            else f"no {what} measured")
    alone = [value(r) for r in rows if r.faults == (name,) and value(r) is not None]
    if alone:
        text += f" (alone {', '.join(f'{g:.1f}' for g in alone)} s)"
    return text


def gaps_by_fault(rows: list[Row]) -> list[str]:
    """Per host fault: the confirm gap (median, max) of the runs it was in, and what each hit."""
    out = []
    for name in HOST_FAULTS:
        mine = [r for r in rows if name in r.faults]
        if mine:
            figures = _figure_of(mine, name, lambda r: r.confirm_gap_s, "confirm")
            out.append(f"{name}: {len(mine)} runs, confirm gap {figures}; hit {' '.join(r.node for r in mine)}")
    return out


def pauses_by_fault(rows: list[Row]) -> list[str]:
    """Per cluster fault: the pause (median, max) of the runs it was in (and of
    the run of it alone), the nodes and how many of each sale's SKUs paused."""
    out = []
    for name in CLUSTER_FAULTS:
        mine = [r for r in rows if name in r.faults]
        if mine:
            figures = _figure_of(mine, name, lambda r: r.pause_s, "pause")
            out.append(f"{name}: {len(mine)} runs, pause {figures}; nodes {' '.join(r.node for r in mine)}; "
                       f"SKUs paused {' '.join(r.paused for r in mine)}")
    return out


# --cluster's RabbitMQ cluster: its own three nodes (scripts/cluster.sh), apart
# from bash scripts/cluster's (5681) and the test leg's (5684).
RABBITMQ_BASE = 5687
CLUSTER_WORKERS = 2


def start_stack(port: int, server: str, rabbit: faults.RabbitCluster | None) -> Stack:
    """One web tier (2 processes) on `port`, one worker and beat; with a
    RabbitMQ cluster (--cluster), as scripts/up --cluster runs them: two web
    instances (a process each, the same 2 in all) behind HAProxy on `port`,
    two workers (each partition: one active confirm consumer, one standby) and beat once."""
    if rabbit is None:
        return Stack(port, [harness.start_web(port, 2, log="chaos-web.log", server=server)],
                     [harness.start_worker(log="chaos-worker.log")], harness.start_beat(log="chaos-beat.log"))
    web_ports = [port + 1 + i for i in range(2)]
    webs = [harness.start_web(p, 1, extra={"SECKILL_TRUSTED_PROXIES": harness.PROXY_SOURCE},
                              log=f"chaos-web-{i}.log", server=server) for i, p in enumerate(web_ports, 1)]
    proxy = harness.start_proxy(port, web_ports, log="chaos-haproxy.log")
    names = [f"chaos{i}" for i in range(1, CLUSTER_WORKERS + 1)]
    workers = [harness.start_worker(log=f"chaos-worker-{i}.log", name=f"{n}@%h", wait=False)
               for i, n in enumerate(names, 1)]
    host = socket.gethostname()  # Celery's %h
    stack = Stack(port, webs, workers, harness.start_beat(log="chaos-beat.log"), web_ports=web_ports,
                  worker_names=[f"{n}@{host}" for n in names], proxy=proxy, rabbit=rabbit)
    stack.wait_workers()
    return stack


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="every fault alone, six pairs and the Redis-loss runs "
                    "(with --cluster: each node fault alone and paired, worker-kill and web-kill alone)")
    ap.add_argument("--only", help="comma-separated faults (with their pairs)")
    ap.add_argument("--list", action="store_true", help="list the faults and exit")
    ap.add_argument("--cluster", action="store_true",
                    help="on the local Redis Cluster (bash scripts/cluster), with its node faults")
    ap.add_argument("--cluster-base", type=int, default=None,
                    help="the cluster's first port (default SECKILL_REDIS_CLUSTER_BASE, else 7000)")
    ap.add_argument("--rabbitmq-base", type=int, default=None,
                    help="with --cluster: the RabbitMQ cluster's first port (default SECKILL_RABBITMQ_CLUSTER_BASE, "
                         f"else {RABBITMQ_BASE}; scripts/cluster.sh's nodes, started when not running)")
    ap.add_argument("--partitions", type=int, default=1,
                    help="SECKILL_CONFIRM_PARTITIONS of every process (default 1)")
    ap.add_argument("--stock", type=int, default=None, help="units per SKU (300; 100 on a cluster, of four SKUs)")
    ap.add_argument("--demand", type=int, default=1200, help="clicks per run (plus one in ten retried)")
    ap.add_argument("--buyers", type=int, default=600)
    ap.add_argument("--concurrency", type=int, default=48)
    ap.add_argument("--server", choices=("granian", "gunicorn"), default="granian",
                    help="the web tier's server (default granian, as deployed)")
    args = ap.parse_args()
    names = fault_names(args.cluster)
    if args.list:
        for name in names:
            fn = FAULTS[name]
            say(f"{name}: {(fn.__doc__ or '').strip().splitlines()[0] if fn.__doc__ else ''}")
        return 0
    only = args.only.split(",") if args.only else None
    unknown = set(only or ()) - set(names)
    if unknown:
        raise SystemExit(f"unknown fault(s){' on a cluster' if args.cluster else ''}: "
                         f"{', '.join(sorted(unknown))}; see --list")
    runs = plan(only, args.quick, args.cluster)
    cluster = rabbit = None
    if args.cluster:
        base = args.cluster_base or int(os.environ.get("SECKILL_REDIS_CLUSTER_BASE") or 7000)
        cluster = faults.Cluster(base)
        rabbit = faults.RabbitCluster(args.rabbitmq_base or int(os.environ.get("SECKILL_RABBITMQ_CLUSTER_BASE")
                                                                or RABBITMQ_BASE))
    partitions = max(1, args.partitions)
    stock = args.stock or (100 if cluster else 300)
    configure(cluster, rabbit, partitions)

    where = (f"Redis Cluster {faults.CLUSTER_HOST}:{cluster.ports[0]}-{cluster.ports[-1]}, prefix {CLUSTER_PREFIX}"
             if cluster else f"Redis db {REDIS_DB}")
    broker = (f"RabbitMQ cluster {faults.CLUSTER_HOST}:{rabbit.ports[0]}-{rabbit.ports[-1]}" if rabbit
              else f"RabbitMQ {faults.RABBITMQ_PORT}")
    say(f"setting up a fresh database {DB_NAME}, {where}, {broker} and queue {QUEUE} ({partitions} confirm "
        f"partition{'s' if partitions > 1 else ''}) ...")
    faults.ensure_up()
    if cluster:
        cluster.up()
        rabbit.up()
    harness.fresh_stores()
    tokens = harness.make_buyers(args.buyers)
    port = 19000 + random.randint(0, 999)
    stack = start_stack(port, args.server, rabbit)
    rows: list[Row] = []
    columns = CLUSTER_COLUMNS if cluster else COLUMNS
    skus = "four SKUs (two on the master aimed at), " if cluster else ""
    tier = ("two web instances behind HAProxy, two workers" if cluster else "one web tier, one worker")
    say(f"{len(runs)} runs: {skus}stock {stock}{' each' if cluster else ''}, {args.demand} clicks each "
        f"(+10 % retried), {args.concurrency} connections, web server {args.server}, {tier}\n")
    say(f"{'run':<36} " + " ".join(f"{c:>{width(c)}}" for c in columns) + "  verdict")
    try:
        for i, names in enumerate(runs, 1):
            progress(f"run {i}/{len(runs)}: {' + '.join(names)}")
            try:
                row = run_once(stack, tokens, names, stock=stock, demand=args.demand,
                               concurrency=args.concurrency, cluster=cluster, run_index=i - 1)
            except Exception as exc:  # a run that could not complete is a failed run
                row = Row(" + ".join(names), ok=False, note=repr(exc)[:200], faults=names)
                faults.ensure_up()
                if cluster:
                    cluster.up()  # a killed node started again, a paused one resumed
                    rabbit.up()
                for server in stack.servers:
                    if not server.alive:
                        server.start()
                stack.wait_webs()
                stack.wait_workers()
            rows.append(row)
            say(f"{row.name:<36} " + " ".join(cell(row, c) for c in columns)
                + f"  {'ok' if row.ok else 'FAIL'} {row.note}")
    finally:
        for server in stack.servers:
            server.stop()
        faults.ensure_up()
        if cluster:
            cluster.up()
            rabbit.up()

    total = {k: sum(getattr(r, k) for r in rows) for k in ("attempted", "accepted", "lost", "oversold", "failed202")}
    failed_clean = sum(r.failed202 for r in rows if not r.redis_loss)
    dup_clean = sum(r.duplicated for r in rows if not r.redis_loss)
    dup_loss = sum(r.duplicated for r in rows if r.redis_loss)
    drift = sum(abs(r.drift or 0) for r in rows)
    pauses = [r.pause_s for r in rows if r.pause_s is not None]
    pause_max, pause_median = (f"{max(pauses):.1f}", f"{statistics.median(pauses):.1f}") if pauses else ("-", "-")
    gaps = [r.confirm_gap_s for r in rows if r.confirm_gap_s is not None]
    gap_max, gap_median = (f"{max(gaps):.1f}", f"{statistics.median(gaps):.1f}") if gaps else ("-", "-")
    ok = all(r.ok for r in rows)
    if cluster:
        say("")
        for line in pauses_by_fault(rows) + gaps_by_fault(rows):
            say(line)
    redis_kind = f" redis=cluster:{cluster.ports[0]}" if cluster else ""
    broker_kind = f"cluster:{rabbit.ports[0]}" if rabbit else f"single:{faults.RABBITMQ_PORT}"
    say(f"\nruns={len(rows)} attempted={total['attempted']} accepted={total['accepted']} "
        f"failed_after_202={total['failed202']} failed_after_202_without_redis_loss={failed_clean} "
        f"duplicated_after_redis_loss={dup_loss} drift={drift} lost={total['lost']} oversold={total['oversold']} "
        f"duplicated={dup_clean} pause_s_max={pause_max} pause_s_median={pause_median}{redis_kind} "
        f"confirm_gap_s_max={gap_max} confirm_gap_s_median={gap_median} broker={broker_kind} "
        f"partitions={partitions} verdict={'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
