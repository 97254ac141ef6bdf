"""The network faults (--hosts only): cuts between the test bed's hosts
(benchmarks/hosts/cuts.py: nftables drops inside the namespaces of both
sides), each aimed at what serves the sale's first SKU, held while the sale
goes on, and healed before the fault returns. What each hit goes into the node
column (store1:7000>store2:7001: the aimed master, the replica that took over;
mq2|: mq2 cut off; worker1|: that host cut from the broker; web1|: from Redis).

Each is a network partition, not a process fault: the processes on the
minority side live on, keep their connections and go on doing what they were
doing until a timeout tells them otherwise (docs/failures.md, "Partitions on the test bed of hosts")."""
from __future__ import annotations

import time

from benchmarks.chaos.context import Context
from benchmarks.chaos.faults.one_host import redis_loss
from benchmarks.chaos.faults.redis_cluster import _aimed_master
from benchmarks.hosts import bed, cuts

# After the promotion, how long the old master stays cut off with its one client
# (past MAX_LAG: it has stopped taking writes by itself by then).
MASTER_HOLD_S = 5.0
# redis-replica-lag: the replica links cut this long before the master is killed
# (under the node timeout of 2 s, so no failover starts before the kill, and
# under MAX_LAG, so the master goes on taking writes its replicas never see).
LAG_S = 1.5
# rabbitmq-node-isolate: the leader's host cut from the other nodes this long
# (the quorum queue elects a leader on the majority within seconds; the cut
# node's publishes get no confirm meanwhile).
RABBIT_HOLD_S = 20.0
# worker-broker-cut: until the standby's consumer is active (the broker notices
# the dead connection by its heartbeat, 30 s, two missed: up to about 60 s), at most.
WORKER_HOLD_S = 90.0
# web-redis-cut: web1 without Redis this long.
WEB_HOLD_S = 8.0


def _store_of(name: str):
    return bed.host(name.split(":")[0])


def redis_master_isolate(ctx: Context) -> None:
    """The master serving the sale's SKUs cut off from its replicas (every
    other store host) and from every web and worker host but web1, which keeps
    it as a client (the minority side: it may go on writing there until the
    master stops itself, MAX_LAG). Held until a replica took over and
    MASTER_HOLD_S more, then healed: the old master rejoins as a replica."""
    cluster, master = ctx.cluster, _aimed_master(ctx)
    h = _store_of(master)
    cut = cuts.cut(h, [s for s in bed.STORES if s != h] + bed.WEBS[1:] + bed.WORKERS)
    redis_loss(ctx, cut.apply)
    try:
        successor = cluster.wait_promoted(ctx.slot, master)
        time.sleep(MASTER_HOLD_S)
    finally:
        cut.heal()
    ctx.nodes.append(f"{master}>{successor}")


def redis_replica_lag(ctx: Context) -> None:
    """The master's replica links cut (its host from the other store hosts)
    while it takes writes, then the master killed: the replica promoted is
    behind by what the master took meanwhile (the classic lost decrement).
    The loss is the cut: what was written after it is gone."""
    cluster, master = ctx.cluster, _aimed_master(ctx)
    h = _store_of(master)
    cut = cuts.cut(h, [s for s in bed.STORES if s != h])
    redis_loss(ctx, cut.apply)
    try:
        time.sleep(LAG_S)
        cluster.kill(master)
    finally:
        cut.heal()
    ctx.nodes.append(f"{master}>{cluster.wait_promoted(ctx.slot, master)}")


def rabbitmq_node_isolate(ctx: Context) -> None:
    """The host of the sale's confirm queue's leader cut from the other
    RabbitMQ hosts (its clients keep it) for RABBIT_HOLD_S, then healed."""
    rabbit = ctx.stack.rabbit
    n = ctx.targets.get("leader") or rabbit.leader(ctx.queue)
    h = rabbit.host(n)
    cut = cuts.cut(h, [m for m in bed.MQS if m != h])
    ctx.mark()
    cut.apply()
    ctx.done.append("rabbitmq-node-isolate")
    try:
        time.sleep(RABBIT_HOLD_S)
    finally:
        cut.heal()

    def after() -> str:
        try:
            now = rabbit.leader(ctx.queue)
        except RuntimeError:
            now = None
        return f"mq{n}|>{'mq' + str(now) if now and now != n else 'mq' + str(n) if now else '?'}"

    ctx.later.append((len(ctx.hosts), after))
    ctx.hosts.append(f"mq{n}|")


def worker_broker_cut(ctx: Context) -> None:
    """The host of the worker whose confirm consumer is active on the sale's
    queue cut from every RabbitMQ host (it keeps MySQL and Redis): its unacked
    deliveries go to the standby once the broker notices, while it may still
    be confirming them. Held until the standby is active (WORKER_HOLD_S at most), then healed."""
    from benchmarks.chaos.faults.hosts import _active

    stack = ctx.stack
    active = ctx.targets.get("active") or _active(ctx)
    if active is None or active["worker"] not in stack.worker_names:
        raise RuntimeError(f"no active consumer of a worker on {ctx.queue}: {active}")
    i = stack.worker_names.index(active["worker"])
    h = bed.WORKERS[i]
    cut = cuts.cut(h, bed.MQS)
    ctx.mark()
    cut.apply()
    ctx.done.append("worker-broker-cut")
    took_over = "?"
    try:
        deadline = time.monotonic() + WORKER_HOLD_S
        while time.monotonic() < deadline:
            now = _active(ctx)
            if now and now["worker"] in stack.worker_names and now["worker"] != active["worker"]:
                took_over = now["worker"].split("@")[0]
                break
            time.sleep(1.0)
    finally:
        cut.heal()
    ctx.hosts.append(f"{h.name}|>{took_over}")


def web_redis_cut(ctx: Context) -> None:
    """web1 cut from every Redis node (it keeps HAProxy, the broker and MySQL) for WEB_HOLD_S, then healed."""
    web1 = bed.WEBS[0]
    cut = cuts.cut(web1, bed.STORES)
    ctx.mark()
    cut.apply()
    ctx.done.append("web-redis-cut")
    try:
        time.sleep(WEB_HOLD_S)
    finally:
        cut.heal()
    ctx.hosts.append(f"{web1.name}|")


def host_isolate(ctx: Context) -> None:
    """The store host of the master serving the sale's SKUs cut from every
    address (the other hosts and the root namespace: HAProxy, beat, this
    matrix), with the replicas of the other shards it holds, until a replica
    took over and MASTER_HOLD_S more, then healed."""
    cluster, master = ctx.cluster, _aimed_master(ctx)
    h = _store_of(master)
    cut = cuts.isolate(h)
    redis_loss(ctx, cut.apply)
    try:
        successor = cluster.wait_promoted(ctx.slot, master)
        time.sleep(MASTER_HOLD_S)
    finally:
        cut.heal()
    ctx.nodes.append(f"{h.name}|{master}>{successor}")
