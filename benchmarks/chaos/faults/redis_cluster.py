"""The Redis Cluster's own faults, each on the master serving the sale's aimed
SKUs now. Each returns once their slots are served again (a replica promoted,
the paused node resumed); the cluster is made whole (every node running, every
replica in sync: scripts/cluster up) at the end of the run, and before a second
node fault of the same run, which then meets a whole shard too. The loss is
the moment the master stopped serving."""
from __future__ import annotations

import signal
import time

from benchmarks.chaos.context import Context
from benchmarks.chaos.faults.one_host import redis_loss
from benchmarks.chaos.nodes import PAUSE_S


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
    redis_loss(ctx, lambda: cluster.kill(port))
    ctx.nodes.append(f"{port}>{cluster.wait_promoted(ctx.slot, port)}")


def redis_master_pause(ctx: Context) -> None:
    """SIGSTOP of the master serving the sale's SKUs for 8 s, then SIGCONT.

    The cluster promotes a replica meanwhile (node timeout 2 s); the old master
    finds itself demoted when it resumes and syncs from its successor."""
    cluster, port = ctx.cluster, _aimed_master(ctx)
    redis_loss(ctx, lambda: cluster.signal(port, signal.SIGSTOP))
    try:
        time.sleep(PAUSE_S)
    finally:
        cluster.signal(port, signal.SIGCONT)
    ctx.nodes.append(f"{port}>?")  # its successor is known once the cluster settled (heal_after)


def redis_failover(ctx: Context) -> None:
    """A planned CLUSTER FAILOVER on a synced replica of the master serving the sale's SKUs."""
    cluster, port = ctx.cluster, _aimed_master(ctx)
    replica = cluster.synced_replica(port)
    redis_loss(ctx, lambda: cluster.failover(replica))
    ctx.nodes.append(f"{port}>{replica}")
