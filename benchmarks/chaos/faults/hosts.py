"""The faults of several hosts (--cluster only): the RabbitMQ cluster's nodes,
one of the two web instances behind HAProxy, the worker whose confirm consumer
is active. Each is aimed at the confirm queue of the sale's first SKU's
partition; what it hit goes into the node column:
  mq5688>5687   node 5688 (that queue's leader) killed, 5687 leads it after
  mq5688~       node 5688 stopped cleanly and started again
  web2          web instance 2 killed (the other serves the rest of the sale)
  chaos1>chaos2 the worker of the active consumer killed, chaos2's consumer active after
A RabbitMQ node, web instance or worker left down is started again at the end
of the run (before a second RabbitMQ node fault of the same run, the killed
node is started again first: two nodes down of three is a lost majority)."""
from __future__ import annotations

from collections.abc import Callable

from benchmarks.chaos.context import Context
from benchmarks.chaos.nodes import RabbitNodes


def _broker(ctx: Context) -> RabbitNodes:
    rabbit = ctx.stack.rabbit
    assert rabbit is not None, "a RabbitMQ node fault needs --cluster"
    if ctx.broker_down:
        rabbit.up()
        ctx.broker_down = False
    return rabbit


# What moves each target: the queue's leader and the active consumer's node
# move with a RabbitMQ node fault, the active consumer also with a worker's.
_MOVED_BY = {"leader": ("rabbitmq-",), "consumer_node": ("rabbitmq-", "worker-"),
             "active": ("rabbitmq-", "worker-")}


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
    if {"rabbitmq-node-kill", "rabbitmq-node-isolate"} & set(names):
        ctx.targets["leader"] = ctx.stack.rabbit.leader(ctx.queue)
    if "rabbitmq-node-restart" in names:
        ctx.targets["consumer_node"] = _consumer_node(ctx)
    if {"worker-active-kill", "worker-broker-cut"} & set(names):
        ctx.targets["active"] = _active(ctx)
