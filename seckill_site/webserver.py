"""The web tier's server settings, one place for both servers it runs under:
granian, the default (`python -m seckill_site.serve`), and gunicorn
(`gunicorn seckill_site.wsgi:application`, reading gunicorn.conf.py).

Read from the environment when imported, with no Django: the server's main
process imports this before any worker exists (docs/operations.md, "The web
server").
"""
from __future__ import annotations

import multiprocessing
import os
import shutil


def _int(name: str, default: int, minimum: int = 0) -> int:
    value = int(os.environ.get(name) or default)
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, not {value}")
    return value


def _on(name: str) -> bool:
    return (os.environ.get(name) or "").strip().lower() in ("1", "true", "yes", "on")


# host:port to listen on (its older name GUNICORN_BIND is read too, for the
# deployments that set it; docker-compose.yml's SECKILL_WEB_BIND is the host
# interface it publishes the port on, another thing)
BIND = os.environ.get("SECKILL_WEB_LISTEN") or os.environ.get("GUNICORN_BIND") or "127.0.0.1:8000"
WORKERS = _int("WEB_CONCURRENCY", multiprocessing.cpu_count(), 1)

# Where the REST API is served: the URLconf routes the apps' API under it, and
# the WSGI entry point sends every request under it through the API's own
# middleware chain (seckill_site.urls, seckill_site.wsgi).
API_PREFIX = "/api/v1/"

# The bounded backlog of each worker process (core.admission): SLOTS requests
# run at once, QUEUE more may wait up to QUEUE_WAIT_S, the rest are answered 503.
SLOTS = _int("SECKILL_WEB_THREADS", int(os.environ.get("GUNICORN_THREADS") or 32), 1)
QUEUE = _int("SECKILL_WEB_QUEUE", 64)
QUEUE_WAIT_S = _int("SECKILL_WEB_QUEUE_WAIT_MS", 2000) / 1000
# The probes (the health check, a metrics scrape by bearer token) skip that
# gate, so they answer under a full purchase load; each runs at most
# PROBE_SLOTS at once per process, and any beyond is answered 503 at once, so
# a flood of probes holds a few threads, never every one (seckill_site.wsgi).
PROBE_SLOTS = _int("SECKILL_WEB_PROBE_SLOTS", 2, 1)
PROBES = 2
# Threads beyond the gate's slots and queue: the probes' slots, and a few from
# which a refusal is always written at once.
REFUSAL_THREADS = 2
SPARE_THREADS = PROBES * PROBE_SLOTS + REFUSAL_THREADS
THREADS = SLOTS + QUEUE + SPARE_THREADS

# Open connections per worker process, idle keep-alive ones included (granian's
# backpressure counts connections, not requests; gunicorn's worker_connections
# the same): a launch's buyers each hold one.
WORKER_CONNECTIONS = _int("SECKILL_WEB_CONNECTIONS", 1000, 1)
# The kernel's queue of connections not yet accepted: with the gate answering
# the excess at once it stays short, so this is a ceiling, not a working depth.
BACKLOG = 1024
KEEPALIVE_S = 5          # an idle keep-alive connection is closed after this
GRACEFUL_S = 10          # on SIGTERM, requests in progress get this long to finish
HEADER_TIMEOUT_S = KEEPALIVE_S  # granian (hyper) applies one timeout to both: an idle
# keep-alive connection, or a client that has not sent its whole header, is closed after it
ACCESS_LOG = _on("SECKILL_WEB_ACCESS_LOG")


# --- Prometheus, multiprocess mode (core.metrics) ------------------------------
# Every worker writes its metrics to files in PROMETHEUS_MULTIPROC_DIR; the
# server's main process sets the directory before any worker imports
# prometheus_client (the mode is chosen at that import), empties it once per
# start, and removes a directory it chose itself when it exits.

def metrics_dir_choose(bind: str = BIND) -> tuple[str, bool]:
    """The metrics directory for a server on `bind` and whether this process
    chose it (left unset, one per listening address under var/: two servers on
    one machine, the tests', the benchmark's and scripts/up, never empty each
    other's). Sets PROMETHEUS_MULTIPROC_DIR for the workers to inherit."""
    own = "PROMETHEUS_MULTIPROC_DIR" not in os.environ
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "var", "prometheus",
        "".join(c if c.isalnum() or c in ".-" else "_" for c in bind)))
    return os.environ["PROMETHEUS_MULTIPROC_DIR"], own


def metrics_dir_empty(path: str) -> None:
    """Once per server start, not when a worker is replaced: the files of
    workers that exited hold counts the totals still need."""
    os.makedirs(path, exist_ok=True)
    for name in os.listdir(path):
        if name.endswith(".db"):
            os.remove(os.path.join(path, name))


def metrics_dir_remove(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def metrics_worker_gone(pid: int) -> None:
    """A worker exited: its live gauges stop counting (its counters stay)."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid)
