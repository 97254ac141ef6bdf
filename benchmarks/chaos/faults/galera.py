"""The Galera cluster's faults (--cluster only): its three nodes behind the
HAProxy front that every process's DATABASE_URL names. Each is aimed at the
writer (the node the front sends new connections to), lands at once, and
leaves the node's return to a thread of the run (joined once the load is
over), so a fault paired after it meets the sale too. What each hit goes into
the node column:
  db3331>3332   node 3331 (the writer) killed, the front on 3332 after
  db3331~       the writer paused (SIGSTOP) for DB_PAUSE_S, then resumed
  db3331^       the writer stopped cleanly and started again (it rejoins by IST)
  db*           all three killed together, then started: the cluster forms again
A node left down is started again at the end of the run, and the cluster made
whole (three nodes Synced, the front routing) before the next run."""
from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable

from benchmarks.chaos.context import Context
from benchmarks.chaos.nodes import DB_PAUSE_S, GaleraNodes


def _galera(ctx: Context) -> GaleraNodes:
    galera = ctx.stack.galera
    assert galera is not None, "a MariaDB node fault needs --cluster (the Galera cluster)"
    for t in ctx.recoveries:  # an earlier database fault of the run: its node back first (a majority)
        t.join()
    if len(galera.running()) < len(galera.ports):
        galera.up()
    return galera


def _meanwhile(ctx: Context, what: str, recover: Callable[[], None]) -> None:
    """`recover` in a thread of the run; what it could not do fails the run."""
    def run() -> None:
        try:
            recover()
        except Exception as exc:  # the node did not come back: the heal after the run tries again
            ctx.failures.append(f"{what}: {exc}"[:300])

    t = threading.Thread(target=run, daemon=True, name=what)
    ctx.recoveries.append(t)
    t.start()


def mariadb_node_kill(ctx: Context) -> None:
    """SIGKILL of the node the front writes to; the front moves to a synced
    node (sticky: it stays there). The node is started again at the end of the run."""
    galera = _galera(ctx)
    port = galera.writer()
    ctx.mark()
    galera.signal_node(port, signal.SIGKILL)
    ctx.done.append("mariadb-node-kill")

    def after() -> str:
        now = galera.front_node()
        return f"db{port}>{now if now and now != port else '?'}"

    ctx.later.append((len(ctx.hosts), after))
    ctx.hosts.append(f"db{port}>")


def mariadb_node_pause(ctx: Context) -> None:
    """SIGSTOP of the node the front writes to for DB_PAUSE_S, then SIGCONT:
    the front marks it down (its sessions shut), the other two carry on; the
    node resumes, finds itself out of the component and catches up."""
    galera = _galera(ctx)
    port = galera.writer()
    ctx.mark()
    galera.signal_node(port, signal.SIGSTOP)
    ctx.done.append("mariadb-node-pause")

    def resume() -> None:
        time.sleep(DB_PAUSE_S)
        galera.signal_node(port, signal.SIGCONT)

    _meanwhile(ctx, f"mariadb-node-pause {port}", resume)
    ctx.hosts.append(f"db{port}~")


def mariadb_node_restart(ctx: Context) -> None:
    """The node the front writes to stopped cleanly (SIGTERM: it leaves the
    group in order) and started again at once; it rejoins by IST."""
    galera = _galera(ctx)
    port = galera.writer()
    ctx.mark()
    ctx.done.append("mariadb-node-restart")

    def restart() -> None:
        galera.node("term", port)
        galera.node("start", port)

    _meanwhile(ctx, f"mariadb-node-restart {port}", restart)
    ctx.hosts.append(f"db{port}^")


def mariadb_crash_all(ctx: Context) -> None:
    """SIGKILL of all three nodes together, then all started again: with no
    node left in order, they form their last primary component again from disk
    (pc.recovery), else the most advanced one bootstraps (scripts/cluster up)."""
    galera = _galera(ctx)
    ctx.mark()
    galera.crash_all()
    ctx.done.append("mariadb-crash-all")
    _meanwhile(ctx, "mariadb-crash-all", galera.up)
    ctx.hosts.append("db*")
