"""Read by `gunicorn seckill_site.wsgi:application` when started from the project folder.

Threaded workers: the confirm publisher of each process (inventory.publisher)
batches the reservations that its request threads accepted at the same time,
so one publisher confirm covers many clicks.
"""
import multiprocessing
import os

bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("WEB_CONCURRENCY", str(multiprocessing.cpu_count())))
worker_class = "gthread"
threads = int(os.environ.get("GUNICORN_THREADS", "16"))
backlog = 2048
timeout = 30
graceful_timeout = 10
keepalive = 5
accesslog = os.environ.get("GUNICORN_ACCESS_LOG") or None
