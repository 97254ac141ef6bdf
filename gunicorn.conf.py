"""Read by `gunicorn seckill_site.wsgi:application` when started from the project folder."""
import multiprocessing
import os

bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("WEB_CONCURRENCY", str(max(2, multiprocessing.cpu_count() * 2))))
worker_class = "sync"
backlog = 2048
timeout = 30
graceful_timeout = 10
keepalive = 5
accesslog = os.environ.get("GUNICORN_ACCESS_LOG") or None
raw_env = ["SECKILL_PROCESS_ROLE=web"]
