"""Read by `gunicorn seckill_site.wsgi:application` when started from the project folder.

Threaded workers keep client connections alive; a few threads per process
overlap the waits on Redis and RabbitMQ.
"""
import multiprocessing
import os

bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("WEB_CONCURRENCY", str(multiprocessing.cpu_count())))
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "gthread")
threads = int(os.environ.get("GUNICORN_THREADS", "8"))
backlog = 2048
timeout = 30
graceful_timeout = 10
keepalive = 5
accesslog = os.environ.get("GUNICORN_ACCESS_LOG") or None

# --- Prometheus, multiprocess mode (core.metrics) ------------------------------
# The workers are forked from this process, so the directory set here is in
# every worker's environment before it imports prometheus_client. Left unset, it
# is one directory per listening address under var/: two servers on one machine
# (the tests', the benchmark's, scripts/up) then never empty each other's.
_OWN_METRICS_DIR = "PROMETHEUS_MULTIPROC_DIR" not in os.environ
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "var", "prometheus",
    "".join(c if c.isalnum() or c in ".-" else "_" for c in bind)))


def on_starting(server):
    """Empty the metrics directory once per server start (not when a worker is
    replaced: the files of exited workers hold counts the totals still need)."""
    path = os.environ["PROMETHEUS_MULTIPROC_DIR"]
    os.makedirs(path, exist_ok=True)
    for name in os.listdir(path):
        if name.endswith(".db"):
            os.remove(os.path.join(path, name))


def child_exit(server, worker):
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def on_exit(server):
    """A directory chosen here goes with the server (tests start many, on random ports)."""
    if _OWN_METRICS_DIR:
        import shutil

        shutil.rmtree(os.environ["PROMETHEUS_MULTIPROC_DIR"], ignore_errors=True)
