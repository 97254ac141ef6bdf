"""After a run: whatever its faults left down started again and waited for, so
the next run starts on a whole system."""
from __future__ import annotations

import time

from benchmarks.chaos.context import Context


def heal_hosts(ctx: Context) -> None:
    """Every MariaDB node, RabbitMQ node, web instance and worker a fault left
    down started again (the database and the broker first: the others connect
    to them), and waited for: the Galera cluster whole (three nodes Synced)."""
    stack = ctx.stack
    for i, what in ctx.later:
        ctx.hosts[i] = what()
    ctx.later.clear()
    for t in ctx.recoveries:
        t.join()
    if stack.galera is not None:  # the database first: the others reconnect to it
        stack.galera.up()
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
    from core.redis.errors import RedisError
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
