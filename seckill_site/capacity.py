"""The MySQL connections this deployment may open, against MariaDB's
max_connections: asked once when a web server starts (seckill_site/serve.py,
gunicorn.conf.py), before any worker process exists.

Each web process lends a connection to every request it runs, up to
SECKILL_WEB_THREADS at once (core.connections), and to each probe it runs
beside them (health, metrics: SECKILL_WEB_PROBE_SLOTS each); a Celery worker holds one per
task thread, one per confirm partition and one for the bucket mover; beat one.
Past max_connections MariaDB refuses the next connection ("Too many
connections"), a pay, a cancel or a confirm fails instead of waiting, and on a
host with many cores WEB_CONCURRENCY's default (one process per core) gets
there alone. The sum counts one web host and one worker: a deployment of
several adds them up itself (docs/operations.md, "The web server").

Read with Django's settings but without setting Django up: the server's main
process only reads, opens one connection and closes it.
"""
from __future__ import annotations

import sys

from seckill_site import webserver

CONNECT_TIMEOUT_S = 3
# MySQLdb.connect arguments a DATABASES OPTIONS may carry that bear on reaching the server
_CONNECT_OPTIONS = ("ssl", "ssl_mode", "unix_socket", "read_default_file", "read_default_group")


def connections_needed() -> tuple[int, str]:
    """(the sum, how it is made up, naming the settings)."""
    from django.conf import settings

    probes = webserver.PROBES * webserver.PROBE_SLOTS
    web = webserver.WORKERS * (webserver.SLOTS + probes)
    worker = settings.CELERY_WORKER_CONCURRENCY + settings.SECKILL_CONFIRM_PARTITIONS + 1
    how = (f"{webserver.WORKERS} web processes (WEB_CONCURRENCY) x ({webserver.SLOTS} requests "
           f"(SECKILL_WEB_THREADS) + {probes} probes (SECKILL_WEB_PROBE_SLOTS)) + a worker's "
           f"{settings.CELERY_WORKER_CONCURRENCY} task threads "
           f"(SECKILL_WORKER_CONCURRENCY), {settings.SECKILL_CONFIRM_PARTITIONS} confirm consumer(s) "
           f"(SECKILL_CONFIRM_PARTITIONS) and the bucket mover + beat")
    return web + worker + 1, how


def server_max_connections() -> int:
    """MariaDB's @@max_connections, over one connection opened for it."""
    import MySQLdb
    from django.conf import settings

    db = settings.DATABASES["default"]
    options = {k: v for k, v in db.get("OPTIONS", {}).items() if k in _CONNECT_OPTIONS}
    conn = MySQLdb.connect(host=db.get("HOST") or "localhost", port=int(db.get("PORT") or 3306),
                           user=db.get("USER") or "", password=db.get("PASSWORD") or "",
                           connect_timeout=CONNECT_TIMEOUT_S, **options)
    try:
        cursor = conn.cursor()
        cursor.execute("SELECT @@max_connections")
        return int(cursor.fetchone()[0])
    finally:
        conn.close()


def connections_check() -> None:
    """Exit with a message naming the settings when the sum exceeds what the
    server allows. A server that cannot be asked now (down, restarting) is no
    reason to refuse the start: that is said, and the web answers 503 until
    MySQL is back, as it would anyway."""
    import MySQLdb

    needed, how = connections_needed()
    try:
        allowed = server_max_connections()
    except MySQLdb.Error as exc:
        # before logging is configured: said on stderr, as sys.exit says the refusal below
        print(f"seckill_site: could not ask MariaDB for max_connections ({exc}); this deployment may open "  # noqa: T201
              f"{needed} connections: {how}", file=sys.stderr)
        return
    if needed > allowed:
        sys.exit(f"seckill_site: this deployment may open {needed} MySQL connections, more than MariaDB's "
                 f"max_connections ({allowed}): {how}. Lower WEB_CONCURRENCY or SECKILL_WEB_THREADS, or raise "
                 f"max_connections on the server.")
