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
