"""What the benchmark (run.py) and the fault matrix (chaos.py) share: a store set
of their own (a MySQL database, a Redis db, a queue prefix), real web (granian,
gunicorn or uWSGI) / worker / beat processes, buyers and SKUs, and the check of every unit and order
in both stores.

Import order matters: call `configure(...)` before anything imports Django.
"""
from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
HOST = "127.0.0.1"

DB_NAME = ""
WEB_DB_USER = ""


def say(msg: str) -> None:
    print(msg, flush=True)


def progress(msg: str) -> None:
    """A progress line on stderr (the figures stay on stdout)."""
    print(f"  .. {msg}", file=sys.stderr, flush=True)


def configure(*, db_name: str, redis_db: int, queue: str, web_db_user: str | None = None,
              extra_env: dict[str, str] | None = None, redis_url: str | None = None,
              redis_prefix: str | None = None) -> None:
    """Point this process (and the servers it starts) at a store set of its own:
    Redis database `redis_db` of the single Redis, or `redis_url` (a Redis
    Cluster, redis+cluster://..., which has database 0 only: give it a
    `redis_prefix` of its own, SECKILL_REDIS_PREFIX)."""
    global DB_NAME, WEB_DB_USER
    DB_NAME, WEB_DB_USER = db_name, web_db_user or f"{db_name}_web"
    os.environ.update(
        DJANGO_SETTINGS_MODULE="seckill_site.settings.local",
        DATABASE_URL=f"mysql://root:@127.0.0.1:3306/{db_name}",
        REDIS_URL=redis_url or f"redis://127.0.0.1:6379/{redis_db}",
        SECKILL_QUEUE=queue,
        SECKILL_BENCH_ENDPOINTS="1",
        DJANGO_LOG_LEVEL="WARNING",
        **({"SECKILL_REDIS_PREFIX": redis_prefix} if redis_prefix else {}),
        **(extra_env or {}),
    )
    sys.path.insert(0, str(ROOT))


CLUSTER_HOST = "127.0.0.1"
CLUSTER_NODES = 9  # bash scripts/cluster: 3 masters x 2 replicas on base..base+8


def cluster_base() -> int:
    """The local cluster's first port: SECKILL_REDIS_CLUSTER_BASE, as bash
    scripts/cluster reads it (7000 by default, the standard cluster)."""
    return int(os.environ.get("SECKILL_REDIS_CLUSTER_BASE") or 7000)


def cluster_url(base: int | None = None) -> str:
    """REDIS_URL of the local cluster on `base` (every node a seed: any that
    answers gives the layout), with its password: scripts/cluster.sh's own
    redis_cluster_url, which makes the password on first use."""
    base = cluster_base() if base is None else base
    script = (f'source "{ROOT}/scripts/lib.sh"; source "{ROOT}/scripts/cluster.sh"; '
              f"redis_cluster_use {int(base)}; redis_cluster_url")
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    if done.returncode != 0 or not done.stdout.startswith("redis+cluster://"):
        raise RuntimeError(f"redis_cluster_url (base {base}) failed: {done.stderr.strip()[-400:]}")
    return done.stdout.strip()


def fresh_stores() -> None:
    """Drop and create the database (and the web's MySQL user, whose statements
    the server counts), migrate, empty the Redis db and the queues."""
    import MySQLdb

    conn = MySQLdb.connect(host=HOST, user="root", passwd="", port=3306)
    cur = conn.cursor()
    cur.execute(f"DROP DATABASE IF EXISTS {DB_NAME}")
    cur.execute(f"CREATE DATABASE {DB_NAME} CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
    for host in ("%", "localhost"):
        cur.execute(f"CREATE USER IF NOT EXISTS '{WEB_DB_USER}'@'{host}' IDENTIFIED BY ''")
        cur.execute(f"GRANT ALL PRIVILEGES ON {DB_NAME}.* TO '{WEB_DB_USER}'@'{host}'")
    cur.execute("SET GLOBAL userstat = 1")
    conn.close()

    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    redis_fresh()
    from seckill_site.celery import app

    from inventory import messages

    with app.connection_for_write() as c:
        for q in (settings.CELERY_QUEUE, *messages.confirm_queue_names_all(), settings.CELERY_DEAD_LETTER_QUEUE):
            try:
                c.channel().queue_delete(q)
            except Exception:
                pass


def redis_fresh() -> None:
    """Empty this run's Redis: its database of the single Redis (FLUSHDB), or
    on a cluster (shared, database 0 only) the keys of its own prefix, never a
    FLUSH. Then check every shard as new, as a process meeting it would, and
    lift the claims fence that check raises: nothing was in flight, and left
    standing it would answer the first purchases 503 until its message came
    out of the confirm queue."""
    from accounts import token_cache
    from core.redis import clustered, forget_everything, instance_check, redis, shards
    from inventory.redis import snapshots

    if clustered():
        forget_everything()
    else:
        redis().flushdb()
    for shard in shards():
        instance_check(shard, recorded_only=True)
        shard.client.delete(token_cache.claims_fence_key(shard.tag))
        snapshots.fence_forget(sku_id=token_cache.CLAIMS_FENCE_PREFIX + shard.tag)


def make_buyers(n: int) -> list[str]:
    from django.contrib.auth import get_user_model
    from django.db import transaction
    from rest_framework.authtoken.models import Token

    User = get_user_model()
    tag = uuid.uuid4().hex[:6]
    with transaction.atomic():
        User.objects.bulk_create([User(username=f"bench-{tag}-{i}", password="!") for i in range(n)])
    users = list(User.objects.filter(username__startswith=f"bench-{tag}-"))
    with transaction.atomic():
        return [Token.objects.create(user=u).key for u in users]


def new_sku(stock: int, limit: int = 10, prefix: str = "BENCH", sku_id: str | None = None) -> str:
    from inventory.services.skus import sku_create

    sku_id = sku_id or f"{prefix}-{uuid.uuid4().hex[:8]}"
    sku_create(sku_id=sku_id, stock=stock, per_user_limit=limit, actor="bench")
    return sku_id


def redis_masters() -> list[str]:
    """The nodes that serve the gate's slots now: the one Redis, or each
    master of the cluster (host:port), sorted."""
    from core.redis import shards

    return sorted({shard.name for shard in shards()})


def master_of(sku_id: str) -> str:
    """The node serving the SKU's keys now (its hash tag's slot)."""
    from core.redis import redis, shard_of
    from inventory.redis.keys import sku_keys

    return shard_of(redis(), sku_keys(sku_id).stock).name


def split_stock(total: int, parts: int) -> list[int]:
    """`total` units in `parts` shares as even as they go (the first ones a unit more)."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def new_skus(stock: int | list[int], limit: int = 10, prefix: str = "BENCH") -> list[str]:
    """New SKUs, one on each master (one SKU on the single Redis), in the
    order of redis_masters(), each with `stock` (or the stock of its place in
    the list): the ids are drawn until each master holds one (a SKU's keys
    share the hash tag {<sku id>}, whose slot says the master)."""
    masters = redis_masters()
    stocks = stock if isinstance(stock, list) else [stock] * len(masters)
    if len(stocks) != len(masters):
        raise ValueError(f"{len(stocks)} stocks for {len(masters)} masters")
    if len(masters) == 1:
        return [new_sku(stocks[0], limit, prefix)]
    chosen: dict[str, str] = {}
    while len(chosen) < len(masters):
        sku_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
        chosen.setdefault(master_of(sku_id), sku_id)
    return [new_sku(n, limit, sku_id=chosen[m]) for m, n in zip(masters, stocks)]


def evalsha_calls() -> dict[str, int]:
    """EVALSHA calls each master served so far (INFO commandstats): every
    script, the token's authorize and key claim as well as reserve, and every
    other client of that Redis."""
    from core.redis import shards

    out = {}
    for shard in shards():
        stats = shard.client.info("commandstats")
        out[shard.name] = int(stats.get("cmdstat_evalsha", {}).get("calls", 0))
    return out


def web_statements() -> int:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT COALESCE(SUM(SELECT_COMMANDS + UPDATE_COMMANDS + OTHER_COMMANDS), 0) "
                    "FROM information_schema.USER_STATISTICS WHERE USER = %s", [WEB_DB_USER])
        return int(cur.fetchone()[0])


# --- processes ----------------------------------------------------------------------

def _pdeathsig() -> None:
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def die_with_parent():
    """A Popen `preexec_fn`: the child gets SIGTERM when the run that started
    it dies (Linux), so a run killed by a timeout leaves no gunicorn or worker
    behind consuming the next run's queues. Linux ties this to the starting
    thread, so a process started from another thread (a fault restarting a
    worker) is left alone: it gets None."""
    import threading

    return _pdeathsig if threading.current_thread() is threading.main_thread() else None


# Every server this run started, for the CPU accounting: it finds them by pid,
# whatever program they run.
STARTED: list["Server"] = []


class Server:
    def __init__(self, args: list[str], env: dict[str, str], log: str, group: str = "other"):
        (ROOT / "var").mkdir(exist_ok=True)
        self.args, self.env, self.log_name, self.group = args, env, log, group
        self.p: subprocess.Popen | None = None
        STARTED.append(self)
        self.start()

    def start(self) -> "Server":
        self.log = open(ROOT / "var" / self.log_name, "ab")
        self.p = subprocess.Popen(self.args, env=self.env, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT,
                                  start_new_session=True, preexec_fn=die_with_parent())
        return self

    @property
    def alive(self) -> bool:
        return self.p is not None and self.p.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.alive:
            os.killpg(self.p.pid, sig)
            self.p.wait(30)

    def stop(self) -> None:
        if self.alive:
            os.killpg(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()

    def children(self) -> list[int]:
        """Pids of the processes this server forked (gunicorn's workers)."""
        out = subprocess.run(["pgrep", "-P", str(self.p.pid)], capture_output=True, text=True).stdout
        return [int(x) for x in out.split()]

    def log_text(self) -> str:
        path = ROOT / "var" / self.log_name
        return path.read_text(errors="replace") if path.exists() else ""


def wait_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((HOST, port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nothing listening on {port}; see var/*.log")


# The HTTP servers the web tier can run under: granian through the project's
# launcher (seckill_site/serve.py) is the default, gunicorn (gunicorn.conf.py)
# stays supported, uWSGI and the plain granian command (8 blocking threads, no
# launcher) are there to compare by measurement.
WEB_SERVERS = ("granian", "gunicorn", "uwsgi", "granian-cli")
DEFAULT_SERVER = "granian"
# Threads (request slots) per worker process, as gunicorn.conf.py gives gthread.
WEB_THREADS = 8
SERVE = ROOT / "seckill_site" / "serve.py"


def _own_metrics_dir(env: dict[str, str], server: str, port: int) -> None:
    """A fresh Prometheus multiprocess directory for a server started without
    a launcher that picks one (gunicorn.conf.py and serve.py do)."""
    from seckill_site import webserver

    metrics = ROOT / "var" / "prometheus" / f"{server}-{HOST}_{port}"
    webserver.metrics_dir_empty(str(metrics))
    env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics)


def web_server(server: str, app: str, port: int, workers: int, env: dict[str, str], log: str,
               threads: int | None = None) -> Server:
    """Start `app` (a WSGI "module:callable") under `server` on the port with
    `workers` processes, in the web group (the CPU accounting finds it and its
    worker processes by pid). `threads` forces the request threads per process
    (gunicorn's --threads, SECKILL_WEB_THREADS for serve.py); left None, each
    launcher sizes them as deployed (WEB_THREADS for uWSGI, which has none)."""
    bind = f"{HOST}:{port}"
    # the launchers' settings: serve.py reads SECKILL_WEB_*, gunicorn.conf.py the same or GUNICORN_*
    env = dict(env, SECKILL_WEB_BIND=bind, GUNICORN_BIND=bind, WEB_CONCURRENCY=str(workers))
    forced = ["--threads", str(threads)] if threads else []
    if threads:
        env.update(SECKILL_WEB_THREADS=str(threads), GUNICORN_THREADS=str(threads))
    threads = threads or WEB_THREADS
    if server == "gunicorn":
        # the command line wins over gunicorn.conf.py, which sizes threads for its backlog
        args = [str(BIN / "gunicorn"), app, *forced]
    elif server == "granian" and SERVE.exists():
        args = [str(BIN / "python"), "-m", "seckill_site.serve", app]
    elif server in ("granian", "granian-cli"):
        # The plain CLI (before the launcher existed, or to compare with it):
        # the counterparts of gunicorn.conf.py's backlog, keepalive and graceful_timeout.
        _own_metrics_dir(env, server, port)
        args = [str(BIN / "granian"), "--interface", "wsgi", "--workers", str(workers),
                "--blocking-threads", str(threads), "--backlog", "2048", "--http1-keep-alive",
                "--respawn-failed-workers", "--workers-kill-timeout", "10", "--no-access-log",
                "--host", HOST, "--port", str(port), app]
    elif server == "uwsgi":
        if not (BIN / "uwsgi").exists():
            raise SystemExit("no uWSGI in the virtualenv: pip install pyuwsgi (requirements-dev.txt)")
        _own_metrics_dir(env, server, port)
        # - http-socket: the workers parse HTTP themselves. A response with no
        #   Content-Length (Django sets none) ends by closing the connection, so
        #   there is no keep-alive: http11-socket closes the same way, and the
        #   HTTP router that keeps it costs a process hop (and measured ~40 ms a
        #   request here).
        # - lazy-apps: the app is imported in each worker, after the fork, as
        #   gunicorn and granian do: the group publisher's thread and the
        #   connection pools start in the process that uses them.
        # - die-on-term: SIGTERM stops uWSGI (by default it reloads).
        # - harakiri, worker-reload-mercy: gunicorn.conf.py's timeout and
        #   graceful_timeout; thunder-lock: one accept() at a time across workers.
        args = [str(BIN / "uwsgi"), "--master", "--die-on-term", "--lazy-apps", "--need-app",
                "--processes", str(workers), "--threads", str(threads), "--enable-threads",
                "--http-socket", bind, "--listen", "1024", "--thunder-lock", "--harakiri", "30",
                "--worker-reload-mercy", "10", "--disable-logging", "--pythonpath", str(ROOT), "--module", app]
    else:
        raise ValueError(f"unknown web server {server!r}; one of {', '.join(WEB_SERVERS)}")
    web = Server(args, env, log, group="web")
    wait_port(port)
    return web


def start_web(port: int, workers: int, extra: dict[str, str] | None = None, log: str = "bench-web.log",
              server: str = DEFAULT_SERVER) -> Server:
    env = dict(os.environ, DATABASE_URL=f"mysql://{WEB_DB_USER}:@127.0.0.1:3306/{DB_NAME}", **(extra or {}))
    return web_server(server, "seckill_site.wsgi:application", port, workers, env, log)


def start_worker(log: str = "bench-worker.log", extra: dict[str, str] | None = None,
                 wait: bool = True, partitions: int | None = None, name: str | None = None) -> Server:
    """A worker; `partitions` sets its SECKILL_CONFIRM_PARTITIONS (a consumer
    thread per partition; the web tier must publish to as many, so a run sets
    it in the environment for both). `name` is its Celery node name ("w1@%h"),
    which its confirm consumers' tags carry: two workers need two names."""
    env = dict(os.environ, **(extra or {}))
    if partitions is not None:
        env["SECKILL_CONFIRM_PARTITIONS"] = str(partitions)
    worker = Server([str(BIN / "celery"), "-A", "seckill_site", "worker", "-l", "warning", "--concurrency", "4",
                     "--without-mingle", "--without-gossip", *(["-n", name] if name else []),
                     "-Q", os.environ["SECKILL_QUEUE"]],
                    env, log, group="worker")
    if wait:
        wait_consuming()
    return worker


# HAProxy in front of several web instances (issue 21), with the config
# scripts/up --cluster runs: scripts/haproxy-config fills deploy/haproxy.cfg.in.
# It connects to the instances from PROXY_SOURCE, which they trust for
# X-Forwarded-For (SECKILL_TRUSTED_PROXIES).
PROXY_SOURCE = "127.0.0.2"


def start_proxy(port: int, web_ports: list[int], log: str = "bench-haproxy.log") -> Server:
    """HAProxy on `port` in front of the web instances on `web_ports`, with a
    runtime API socket (`.socket`, read by proxy_servers); returns once every
    instance is UP."""
    (ROOT / "var").mkdir(exist_ok=True)
    config, sock = ROOT / "var" / f"{log}.cfg", ROOT / "var" / f"{log}.sock"
    env = dict(os.environ, SECKILL_PROXY_LISTEN=f"{HOST}:{port}", SECKILL_PROXY_SOURCE=PROXY_SOURCE,
               SECKILL_PROXY_WEBS=" ".join(f"{HOST}:{p}" for p in web_ports), SECKILL_PROXY_STATS_SOCKET=str(sock))
    subprocess.run(["sh", str(ROOT / "scripts" / "haproxy-config"), str(ROOT / "deploy" / "haproxy.cfg.in"),
                    str(config)], env=env, check=True)
    subprocess.run(["haproxy", "-q", "-c", "-f", str(config)], check=True)
    proxy = Server(["haproxy", "-W", "-db", "-f", str(config)], dict(os.environ), log, group="proxy")
    proxy.socket = sock
    wait_proxy(proxy, len(web_ports))
    return proxy


def proxy_servers(proxy: Server) -> dict[str, str]:
    """HAProxy's view of its web instances: {"web1": "UP", "web2": "DOWN", ...}
    (empty while its runtime API is not up)."""
    import csv

    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(2)
            s.connect(str(proxy.socket))
            s.sendall(b"show stat\n")
            raw = b""
            while chunk := s.recv(65536):
                raw += chunk
    except OSError:
        return {}
    rows = list(csv.DictReader(raw.decode().lstrip("# ").splitlines()))
    return {r["svname"]: r["status"] for r in rows
            if r.get("pxname") == "web" and r["svname"] not in ("BACKEND", "FRONTEND")}


def wait_proxy(proxy: Server, instances: int, timeout: float = 60) -> None:
    """Until HAProxy has `instances` web instances, every one UP."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proxy.alive:
            raise SystemExit(f"HAProxy exited; see var/{proxy.log_name}")
        seen = proxy_servers(proxy)
        if len(seen) == instances and set(seen.values()) == {"UP"}:
            return
        time.sleep(0.2)
    raise SystemExit(f"HAProxy does not see every web instance UP: {proxy_servers(proxy)}")


def start_beat(log: str = "bench-beat.log") -> Server:
    (ROOT / "var").mkdir(exist_ok=True)
    schedule = ROOT / "var" / f"{log}.schedule"
    return Server([str(BIN / "celery"), "-A", "seckill_site", "beat", "-l", "warning", "-s", str(schedule)],
                  dict(os.environ), log, group="worker")


def wait_consuming(timeout: float = 60, consumers: int = 1) -> None:
    """Until `consumers` confirm consumers of every partition report themselves alive."""
    from django.conf import settings

    from inventory.redis import liveness

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = liveness.partitions_consumed(within_s=3)
        if all(seen.get(k, 0) >= consumers for k in range(settings.SECKILL_CONFIRM_PARTITIONS)):
            return
        time.sleep(0.1)
    raise SystemExit("no confirm consumer came up; see var/*worker*.log")


# --- CPU accounting ----------------------------------------------------------------

# The shared servers this run does not start, found by their program name.
SYSTEM_GROUPS = {"mariadbd": "mariadb", "redis-server": "redis", "beam.smp": "rabbitmq"}


def _proc_table() -> dict[int, tuple[int, str, float]]:
    """pid -> (parent pid, program name, CPU seconds of the process and of the
    children it has reaped), for every process in /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    table = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            raw = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        name, rest = raw[raw.index("(") + 1:raw.rindex(")")], raw.rsplit(")", 1)[1].split()
        # utime, stime, cutime, cstime: a worker that died and was reaped is in its parent's c-times
        table[int(pid)] = (int(rest[1]), name, sum(int(x) for x in rest[11:15]) / tick)
    return table


def _tree(table: dict[int, tuple[int, str, float]], root: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in table and pid not in out:
            out.add(pid)
            todo.extend(kids.get(pid, ()))
    return out


class _RedisPids:
    def __init__(self) -> None:
        self.ports: set[int] | None = None  # the ports of this run's Redis servers, once known
        self.pids: dict[int, int] = {}  # pid -> port


_redis_pids = _RedisPids()


def _redis_ports() -> set[int]:
    """The ports of the Redis this run uses: the one server of REDIS_URL, or
    every node of the cluster (replicas too: replication is part of the cost)."""
    from core.redis import clustered, redis

    if clustered():
        return {node.port for node in redis().get_nodes()}
    return {int(redis().connection_pool.connection_kwargs.get("port", 6379))}


def _our_redis(table: dict[int, tuple[int, str, float]]) -> dict[int, int] | None:
    """The pids of this run's Redis servers, told apart from the machine's
    other redis-server processes (several clusters may run beside the single
    Redis) by the port in their title ("redis-server 127.0.0.1:7000 [cluster]"),
    each with its port; None (count every redis-server) before Django is set
    up or when none is found."""
    if _redis_pids.pids and all(p in table for p in _redis_pids.pids):
        return _redis_pids.pids
    try:
        if _redis_pids.ports is None:
            _redis_pids.ports = _redis_ports()
    except Exception:  # noqa: BLE001  (Django not set up yet, a Redis not answering: count them all)
        return None
    found = {}
    for pid, (_, name, _) in table.items():
        if name != "redis-server":
            continue
        try:
            title = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        port = title.split()[1].rpartition(":")[2] if len(title.split()) > 1 else ""
        if port.isdigit() and int(port) in _redis_pids.ports:
            found[pid] = int(port)
    _redis_pids.pids = found
    return found or None


class _BrokerPids:
    def __init__(self) -> None:
        self.ports: set[int] | None = None  # the AMQP ports of this run's broker nodes, once known
        self.pids: set[int] = set()


_broker_pids = _BrokerPids()


def _broker_ports() -> set[int]:
    """The AMQP ports of the broker this run uses: every URL of
    CELERY_BROKER_URL (one node, or a cluster's nodes joined by ';')."""
    from urllib.parse import urlsplit

    from django.conf import settings

    return {urlsplit(url.strip()).port or 5672 for url in settings.CELERY_BROKER_URL.split(";") if url.strip()}


def _listening_inodes(ports: set[int]) -> set[str]:
    """The socket inodes listening on `ports` (any address, IPv4 or IPv6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == "0A" and int(f[1].rpartition(":")[2], 16) in ports:  # 0A: LISTEN
                found.add(f[9])
    return found


def _our_broker(table: dict[int, tuple[int, str, float]]) -> set[int] | None:
    """The pids of this run's RabbitMQ nodes: the beam.smp processes holding a
    socket that listens on one of the broker's AMQP ports, told apart from the
    machine's other nodes (a cluster beside the single broker); None (count
    every beam.smp) before Django is set up or when none is found (another
    user's processes, whose sockets cannot be read)."""
    if _broker_pids.pids and all(p in table for p in _broker_pids.pids):
        return _broker_pids.pids
    try:
        if _broker_pids.ports is None:
            _broker_pids.ports = _broker_ports()
    except Exception:  # noqa: BLE001  (Django not set up yet: count them all)
        return None
    inodes = {f"socket:[{i}]" for i in _listening_inodes(_broker_pids.ports)}
    found = set()
    for pid, (_, name, _) in table.items():
        if name != "beam.smp":
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    found.add(pid)
                    break
            except OSError:
                continue
    _broker_pids.pids = found
    return found or None


class CpuSample(dict):
    """cpu_seconds()'s figures, and each shared store process's own (pid ->
    (its keys, seconds)), so a delta is taken process by process."""

    pids: dict[int, tuple[tuple[str, ...], float]]


def cpu_seconds() -> CpuSample:
    """CPU time used so far: the servers this run started (web, worker) by
    their pids and descendants, whatever program they run; the shared stores by
    name; the load generator as this process plus the generator processes it
    ran and reaped (wrk, forked asyncio clients: benchmarks.loadgen counts them).
    Of the redis-server processes, only this run's Redis (_our_redis), also
    each node alone as "redis:<port>"; of the beam.smp processes, only this
    run's broker nodes (_our_broker)."""
    from benchmarks import loadgen

    table = _proc_table()
    out = CpuSample({"web": 0.0, "worker": 0.0, **{g: 0.0 for g in SYSTEM_GROUPS.values()}})
    out.pids = {}
    mine: set[int] = set()
    for server in STARTED:
        if server.alive:
            pids = _tree(table, server.p.pid) - mine
            mine |= pids
            out[server.group] = out.get(server.group, 0.0) + sum(table[p][2] for p in pids)
    ours = _our_redis(table)
    broker = _our_broker(table)
    for pid, (_, name, secs) in table.items():
        group = SYSTEM_GROUPS.get(name)
        if group == "redis" and ours is not None and pid not in ours:
            continue  # another Redis on the machine (the other clusters, the single one)
        if group == "rabbitmq" and broker is not None and pid not in broker:
            continue  # another RabbitMQ node (a cluster beside the single broker)
        if group and pid not in mine:
            out[group] += secs
            out.pids[pid] = ((group,), secs)
    for pid, port in (ours or {}).items():  # and each of them alone (a cluster's nodes)
        out[f"redis:{port}"] = table[pid][2]
        if pid in out.pids:
            out.pids[pid] = (("redis", f"redis:{port}"), out.pids[pid][1])
    out["loadgen"] = time.process_time() + loadgen.child_cpu_seconds()
    return out


def cpu_delta(before: dict[str, float]) -> dict[str, float]:
    """The CPU used since `before`. The shared stores' process by process: one
    restarted meanwhile (another client of the machine's servers) counts from
    its start, the one it replaced until its last sample, never a negative."""
    after = cpu_seconds()
    out = {k: after[k] - before.get(k, 0.0) for k in after}
    if isinstance(before, CpuSample):
        for k in {k for keys, _ in after.pids.values() for k in keys} | {
                k for keys, _ in before.pids.values() for k in keys}:
            out[k] = 0.0
        for pid, (keys, secs) in after.pids.items():
            was = before.pids.get(pid)
            for k in keys:
                out[k] += secs - (was[1] if was and was[0] == keys else 0.0)
    return out


def format_cpu(delta: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.1f}s" for k, v in delta.items() if not k.startswith("redis:"))


# --- load -----------------------------------------------------------------------------

def order_bodies(sku_ids: str | list[str]) -> list[bytes]:
    """The purchase body of each SKU (one unit)."""
    return [json.dumps({"sku_id": s, "quantity": 1}).encode()
            for s in ([sku_ids] if isinstance(sku_ids, str) else sku_ids)]


def order_requests(path: str, tokens: list[str], sku_id: str | list[str], used: dict[int, str] | None = None,
                   seed: int = 7, key_prefix: str | None = None):
    """Purchases of one SKU, or of several in turn (request i buys sku_id[i % n])."""
    bodies = order_bodies(sku_id)
    rnd = random.Random(seed)
    prefix = key_prefix or (sku_id if isinstance(sku_id, str) else sku_id[0])

    def make(i: int):
        token = rnd.choice(tokens)
        if used is not None:
            used[i] = token
        return ("POST", path, {"Authorization": f"Token {token}", "Content-Type": "application/json",
                               "Idempotency-Key": f"{prefix}-{i}"}, bodies[i % len(bodies)])

    return make


def accepted_ids(results) -> set[str]:
    out = set()
    for r in results:
        if r.status == 202:
            out.add(json.loads(r.body)["order_id"])
    return out


def accepted_skus(results, sku_ids: list[str] | None = None) -> dict[str, str]:
    """order id -> SKU id of every 202: the SKU the body names, else the one
    request i bought (sku_ids[i % n], as order_requests sends them)."""
    out = {}
    for r in results:
        if r.status == 202:
            body = json.loads(r.body)
            out[body["order_id"]] = body.get("sku_id") or sku_ids[r.index % len(sku_ids)]
    return out


# --- verdict ------------------------------------------------------------------------------

@dataclass
class Balance:
    """One SKU's figures in both stores, and what they say about the promise."""

    sku: str
    stock: int
    accepted: int
    confirmed: int = 0        # accepted and an order in MySQL, not FAILED
    failed_after_202: int = 0
    lost: int = 0             # accepted, no order at all
    duplicated: int = 0       # orders with no 202 behind them (or two for one key)
    oversold: int = 0
    drift: int | None = None  # Redis available - what MySQL implies, after settling
    balanced: bool = True
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return (self.balanced and self.lost == 0 and self.oversold == 0 and self.duplicated == 0
                and self.drift in (0, None))


def balance(sku_id: str, stock: int, accepted: set[str]) -> Balance:
    """Every unit and order of a SKU in both stores."""
    from inventory.redis import live as redis_live
    from inventory.models import Sku
    from orders.models import Order

    from django.db.models import Sum

    sku = Sku.objects.get(pk=sku_id)
    rows = dict(Order.objects.filter(sku_id=sku_id).values_list("order_id", "status"))
    live = redis_live.live_stock(sku_id=sku_id)
    kept = {oid for oid, st in rows.items() if st != "FAILED"}
    held = Order.objects.filter(sku_id=sku_id, status__in=["PENDING_PAYMENT", "PAID"]).aggregate(
        n=Sum("quantity"))["n"] or 0
    b = Balance(sku=sku_id, stock=stock, accepted=len(accepted))
    b.confirmed = len(kept & accepted)
    b.failed_after_202 = sum(1 for oid in accepted if rows.get(oid) == "FAILED")
    b.lost = len(accepted - set(rows))
    b.duplicated = len(kept - accepted)
    # Units orders hold beyond what the SKU can sell, or beyond what its buckets hold.
    b.oversold = max(0, held - (sku.total_stock - sku.frozen_stock)) + max(0, held - sku.locked_stock - sku.sold_stock)
    b.balanced = sku.total_stock == sku.available_stock + sku.frozen_stock + sku.locked_stock + sku.sold_stock
    if live is not None:
        b.drift = live.available - (sku.available_stock - live.inflight)
    b.extra = {"available": sku.available_stock, "locked": sku.locked_stock, "sold": sku.sold_stock,
               "redis_available": live.available if live else None, "in_flight": live.inflight if live else None}
    return b
