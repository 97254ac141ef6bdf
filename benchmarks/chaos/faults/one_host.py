"""The faults of one host: the worker and the web tier killed, the machine's
RabbitMQ, Redis and MariaDB restarted or emptied (benchmarks/servers.py lands
them). Each lands mid-sale and returns once the system is whole again (a killed
process restarted, a server back); worker-down instead stops the worker before
the sale starts and starts it after (the run does both)."""
from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable

from benchmarks import faults as servers
from benchmarks.chaos.context import Context, clock, inflight


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
    """The machine's RabbitMQ stopped (stop_app) for a second and started again: every connection drops."""
    servers.rabbitmq_restart(down_s=1.0)


def redis_loss(ctx: Context, lose: Callable[[], None]) -> None:
    """Note what is in flight, lose every Redis key, note the moment they were gone."""
    ctx.inflight_at_loss.append(inflight(ctx.skus[:ctx.aimed]))
    ctx.redis_loss = True
    lose()
    ctx.losses.append(clock())


def redis_restart(ctx: Context) -> None:
    """Redis stopped without saving and started again empty (the loss is the stop)."""
    redis_loss(ctx, servers.redis_stop)
    time.sleep(0.5)
    servers.redis_start_empty()


def redis_rollback(ctx: Context) -> None:
    """Redis saves a file, sells on a moment, is killed and comes back from that
    file: data older than what it lost (a failover to a lagging replica)."""
    path = servers.redis_save_snapshot()
    time.sleep(0.1)  # short: at 48 connections the sale would sell out before the kill
    redis_loss(ctx, servers.redis_stop)
    servers.redis_start_from(path)


def redis_flushall(ctx: Context) -> None:
    """FLUSHALL mid-sale: every key gone, the server up all along."""
    redis_loss(ctx, servers.redis_flushall)


def mariadb_restart(ctx: Context) -> None:
    """MariaDB shut down for two seconds and started again."""
    servers.mariadb_restart(down_s=2.0)


def web_kill(ctx: Context) -> None:
    """SIGKILL every web worker process at once: requests between their reserve
    and their publish die with them (the server's main process starts new ones;
    connections wait on its socket meanwhile)."""
    ctx.mark()
    for web in ctx.stack.webs:  # on --cluster: of both instances (web-host-kill takes one whole)
        if not web.alive:
            continue
        for pid in web.children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    ctx.stack.wait_webs()


def worker_down(ctx: Context) -> None:
    """Placeholder: the worker is stopped for the whole sale (see before/after)."""
