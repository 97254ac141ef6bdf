"""Read by `gunicorn seckill_site.wsgi:application` when started from the project folder.

The same settings as the default server's (seckill_site/webserver.py, read by
seckill_site/serve.py): threaded workers keep client connections alive, and
each process has enough threads for its bounded backlog (core.admission) to
answer the excess itself.
"""
import os

from seckill_site import webserver

bind = webserver.BIND
workers = webserver.WORKERS
worker_class = "gthread"
threads = webserver.THREADS
worker_connections = webserver.WORKER_CONNECTIONS
backlog = webserver.BACKLOG
timeout = 30
graceful_timeout = webserver.GRACEFUL_S
keepalive = webserver.KEEPALIVE_S
# GUNICORN_ACCESS_LOG names a file, as before; SECKILL_WEB_ACCESS_LOG=1 logs to stderr
accesslog = os.environ.get("GUNICORN_ACCESS_LOG") or ("-" if webserver.ACCESS_LOG else None)

_metrics_dir, _own_metrics_dir = webserver.metrics_dir_choose(bind)


def on_starting(server):
    from seckill_site import capacity

    capacity.connections_check()  # before any worker exists, as seckill_site.serve does
    webserver.metrics_dir_empty(_metrics_dir)


def child_exit(server, worker):
    webserver.metrics_worker_gone(worker.pid)


def on_exit(server):
    """A directory chosen here goes with the server (tests start many, on random ports)."""
    if _own_metrics_dir:
        webserver.metrics_dir_remove(_metrics_dir)
