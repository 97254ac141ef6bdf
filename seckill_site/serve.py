"""The web tier's default server: granian's WSGI interface, set up as the
deployment needs it.

    python -m seckill_site.serve [MODULE:CALLABLE]

serves seckill_site.wsgi:application unless told another WSGI callable (the
benchmark's floor passes benchmarks.floor:application). Settings come from
seckill_site/webserver.py (the environment), the same ones gunicorn.conf.py
gives gunicorn, which stays a supported entry point. granian won on this
machine by measurement (docs/benchmark.md, "Choosing the web server").

What this adds to the plain `granian` command:
- the Prometheus multiprocess directory, set before any worker exists, emptied
  once per start, told of every worker that exits, removed at exit when chosen
  here (gunicorn.conf.py's hooks do the same for gunicorn);
- a worker that dies is replaced however often it dies: granian gives up and
  exits when a worker it respawned dies again within 5.5 s, which would turn
  two kills in a row into a web tier that is gone; here it waits a second and
  replaces it again;
- one listening socket, opened by the main process and inherited by every
  worker, so connections wait while no worker is up;
- a worker whose main process was killed outright stops (the kernel tells
  it), instead of serving on with nobody to replace or stop it;
- threads sized for the bounded backlog (core.admission), so the excess is
  answered 503 by the process rather than queued where nothing sees it;
- a start refused when its processes could open more MySQL connections than
  MariaDB allows (seckill_site/capacity.py).

granian's internals that this needs are used in seckill_site/adapters/granian.py
only, which refuses a granian it was not written for.
"""
from __future__ import annotations

import socket
import sys
import threading
import time

from seckill_site import webserver
from seckill_site.adapters import granian as granian_adapter

DEFAULT_TARGET = "seckill_site.wsgi:application"
# Two deaths of one worker closer than this are a crash loop: slow it down.
CRASH_LOOP_S = 5.5
CRASH_LOOP_PAUSE_S = 1.0
MAIN_PID_VARIABLE = "SECKILL_WEB_MAIN_PID"

logger = granian_adapter.logger  # lines written with granian's own


class Server(granian_adapter.Server):
    """granian's process server, with the replacement rule above."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._last_respawn: dict[int, float] = {}

    def worker_replacing(self, idx: int, pid: int | None) -> None:
        if pid:
            webserver.metrics_worker_gone(pid)
        if time.monotonic() - self._last_respawn.get(idx, -CRASH_LOOP_S) < CRASH_LOOP_S:
            time.sleep(CRASH_LOOP_PAUSE_S)
        self._last_respawn[idx] = time.monotonic()


def build(target: str = DEFAULT_TARGET):
    from granian.constants import HTTPModes, Interfaces
    from granian.http import HTTP1Settings

    host, _, port = webserver.BIND.rpartition(":")
    server = Server(
        target,
        address=host or "127.0.0.1",
        port=int(port),
        interface=Interfaces.WSGI,
        workers=webserver.WORKERS,
        blocking_threads=webserver.THREADS,
        # connections per worker; requests beyond the threads wait inside
        # granian, which the gate keeps short by answering the excess at once
        backpressure=webserver.WORKER_CONNECTIONS,
        backlog=webserver.BACKLOG,
        http=HTTPModes.http1,
        http1_settings=HTTP1Settings(header_read_timeout=webserver.HEADER_TIMEOUT_S * 1000, keep_alive=True),
        websockets=False,
        log_access=webserver.ACCESS_LOG,
        respawn_failed_workers=True,
        workers_kill_timeout=webserver.GRACEFUL_S,
    )
    # granian warns when threads outnumber cores; here most of them wait (the
    # gate's queue) or write refusals, by design: say that instead
    granian_adapter.thread_count_notice_silence()
    logger.info("%d threads per worker process: %d run requests, up to %d wait for one, %d serve the probes "
                "(%d each), %d answer the rest", webserver.THREADS, webserver.SLOTS, webserver.QUEUE,
                webserver.PROBES * webserver.PROBE_SLOTS, webserver.PROBE_SLOTS, webserver.REFUSAL_THREADS)
    metrics_dir, own = webserver.metrics_dir_choose(webserver.BIND)
    server.on_startup(lambda: webserver.metrics_dir_empty(metrics_dir))
    if own:
        server.on_shutdown(lambda: webserver.metrics_dir_remove(metrics_dir))
    return server


def load_in_worker(target: str):
    """granian's loader of the WSGI callable, run in each worker process once
    it exists: first tie the worker's life to the main process. Killed outright
    (SIGKILL, an OOM kill), the main process runs no shutdown, and its workers
    would go on serving on the inherited socket with nobody to replace them or
    stop them, holding the port against the next start; gunicorn's workers exit
    when their parent changes. Here the kernel sends the worker SIGTERM (a
    graceful stop) when the main process dies."""
    import ctypes
    import os
    import signal

    main_pid = int(os.environ.get(MAIN_PID_VARIABLE) or os.getppid())
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != main_pid:
        sys.exit(1)  # the main process died before the line above: nobody would tell us
    # The signal can land while granian is still setting the worker up, where
    # its shutdown may never start; so a watch of our own ends the process
    # once the graceful time is over.
    threading.Thread(target=_orphan_watch, args=(main_pid,), name="orphan-watch", daemon=True).start()
    return granian_adapter.load_target(target)


def _orphan_watch(main_pid: int) -> None:
    import os
    import signal

    while os.getppid() == main_pid:
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGTERM)  # again, in case the first one came too early
    time.sleep(webserver.GRACEFUL_S)
    os._exit(1)


def refuse_a_taken_port(bind: str) -> None:
    """Exit when another process listens on the address. granian's listener
    sets SO_REUSEPORT, so its bind succeeds beside a server already there and
    the kernel then splits the connections between the two (a second
    `scripts/up`, or a restart while the old workers are still exiting, whose
    share is reset). A plain bind tells: it fails while anything listens."""
    host, _, port = bind.rpartition(":")
    probe = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT leftovers are no server
    try:
        probe.bind((host.strip("[]") or "127.0.0.1", int(port)))
    except OSError as exc:
        sys.exit(f"seckill_site.serve: {bind} is already in use ({exc.strerror}); is another server running?")
    finally:
        probe.close()


def main(argv: list[str]) -> None:
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        sys.exit(__doc__)
    refuse_a_taken_port(webserver.BIND)
    from seckill_site import capacity

    capacity.connections_check()
    import os

    os.environ[MAIN_PID_VARIABLE] = str(os.getpid())  # inherited by every worker forked
    build(argv[0] if argv else DEFAULT_TARGET).serve(target_loader=load_in_worker)


if __name__ == "__main__":
    main(sys.argv[1:])
