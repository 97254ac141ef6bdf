"""The test database and the stores' clean start, and real worker and web processes
(a Celery worker with the confirm consumer, a web tier) that see its committed rows."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import uuid
from pathlib import Path

import pytest

from testsupport import ROOT, VENV_BIN, wait_until


def galera_front() -> bool:
    """DATABASE_URL names the front of the local Galera cluster that
    SECKILL_MARIADB_CLUSTER_BASE says (its base + 3), as in scripts/test's cluster leg."""
    from urllib.parse import urlsplit

    base = os.environ.get("SECKILL_MARIADB_CLUSTER_BASE", "")
    url = urlsplit(os.environ.get("DATABASE_URL", ""))
    return base.isdigit() and url.hostname == "127.0.0.1" and url.port == int(base) + 3


def pytest_collection_modifyitems(config, items):
    """Tests marked `redis_cluster` need the Redis Cluster: skipped on one Redis;
    tests marked `mariadb_cluster` need the Galera cluster behind DATABASE_URL:
    skipped on the single server (scripts/test runs both in its cluster leg)."""
    from core.redis.connection import clustered

    skips = []
    if not clustered():
        skips.append(("redis_cluster", pytest.mark.skip(
            reason="needs the Redis Cluster (REDIS_URL=redis+cluster://...; scripts/test's cluster leg)")))
    if not galera_front():
        skips.append(("mariadb_cluster", pytest.mark.skip(
            reason="needs the Galera cluster's front in DATABASE_URL and SECKILL_MARIADB_CLUSTER_BASE "
                   "(scripts/test's cluster leg)")))
    if os.environ.get("SECKILL_HOSTS_BED") != "1":  # the test bed's own leg (scripts/test hosts) runs them
        skips.append(("hosts", pytest.mark.skip(
            reason="needs the multi-host test bed (scripts/test's hosts leg: root, ip netns)")))
    for item in items:
        for marker, skip in skips:
            if item.get_closest_marker(marker):
                item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _clean_stores():
    from django.conf import settings

    from core.redis.connection import clustered, redis
    from core.redis.shards import forget_everything
    from testsupport.stores import redis_trusted

    if clustered():
        forget_everything()  # a shared cluster: only this prefix's keys
    else:
        redis().flushdb()
    redis_trusted()
    from inventory.messages import queues
    from seckill_site.celery import app

    with app.connection_for_write() as conn:
        # The test queues are the tests' own: delete them, so they are declared
        # again with exactly the arguments the code asks for (every partition
        # of the confirm stream a test may have used).
        for queue in (settings.CELERY_QUEUE, *queues.confirm_queue_names_all(),
                      settings.CELERY_DEAD_LETTER_QUEUE):
            with contextlib.suppress(Exception):  # not declared yet
                conn.channel().queue_delete(queue)


@pytest.fixture(autouse=True)
def _database_connected(django_db_blocker):
    """Each test starts on a live database connection: a test that killed,
    paused or restarted a database node (or the front moved meanwhile) leaves
    this process's connection dead, and Django reconnects only at a request's
    end, so every later test would meet "server has gone away"."""
    from django.db import connection

    with django_db_blocker.unblock():
        if connection.connection is not None and not connection.is_usable():
            connection.close()


@pytest.fixture(autouse=True)
def _redis_checked(django_db_blocker):
    """Each test starts on checked Redis shards with no claims fence: a test
    that wiped or replaced a store leaves its pause behind otherwise (each
    test's SKUs and buyers are its own, so nothing of an earlier one is in
    flight for that fence to wait for)."""
    yield
    from accounts import token_cache
    from core.redis.errors import RedisError
    from core.redis.instance import instance_check
    from core.redis.shards import shards

    try:
        for shard in shards():
            pipe = shard.client.pipeline(transaction=False)
            pipe.get(shard.key("instance"))
            pipe.get(token_cache.claims_fence_key(shard.tag))
            instance, fence = pipe.execute()
            if instance is None:
                with django_db_blocker.unblock():  # the check fences the live SKUs MySQL has there
                    instance_check(shard, recorded_only=True)
            if instance is None or fence is not None:
                fence = token_cache.claims_fence_key(shard.tag)
                shard.client.delete(fence, token_cache.claims_fence_passed_key(fence))
    except RedisError:
        pass  # a test that stopped a store: the next one meets it as it is


@pytest.fixture(scope="session")
def django_db_setup(django_test_environment, django_db_blocker):
    """Always create the test database: the tests here use committed data
    (`live_db`) instead of pytest-django's per-test markers, which would
    otherwise leave the test database uncreated and the tests on the real one."""
    from django.test.utils import setup_databases, teardown_databases

    with django_db_blocker.unblock():
        config = setup_databases(verbosity=0, interactive=False, aliases={"default"})
    yield
    with django_db_blocker.unblock():
        teardown_databases(config, verbosity=0)


@pytest.fixture
def live_db(django_db_setup, django_db_blocker):
    """Committed data, visible to the worker and web processes."""
    with django_db_blocker.unblock():
        yield


def database_url(db: dict) -> str:
    """The DATABASE_URL a spawned process needs to reach the database this
    test session uses (the single server, or the cluster's front)."""
    from urllib.parse import quote

    auth = quote(db["USER"] or "root", safe="") + (":" + quote(db["PASSWORD"], safe="") if db["PASSWORD"] else ":")
    return f"mysql://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 3306}/{db['NAME']}"


@pytest.fixture(scope="session")
def process_env(django_db_setup, django_db_blocker) -> dict[str, str]:
    from django.conf import settings
    from django.db import connection

    with django_db_blocker.unblock():
        db = connection.settings_dict
        name = db["NAME"]
    assert name.startswith("test_"), name
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="seckill_site.settings.test",
        DATABASE_URL=database_url(connection.settings_dict),
        REDIS_URL=settings.REDIS_URL,
        SECKILL_REDIS_PREFIX=settings.SECKILL_REDIS_PREFIX,
        SECKILL_QUEUE=settings.CELERY_QUEUE,
        PYTHONUNBUFFERED="1",
    )
    return env


class Proc:
    def __init__(self, args: list[str], env: dict[str, str], log: Path):
        self.args, self.env, self.log = args, env, log
        self.popen: subprocess.Popen | None = None

    def start(self) -> Proc:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        from benchmarks.harness.processes import die_with_parent

        with open(self.log, "ab") as fh:  # the child keeps its own copy of the descriptor
            self.popen = subprocess.Popen(self.args, env=self.env, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT,
                                          start_new_session=True, preexec_fn=die_with_parent())
        return self

    def stop(self, sig: int = 15) -> None:
        if self.popen and self.popen.poll() is None:
            os.killpg(self.popen.pid, sig)
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, 9)
                self.popen.wait()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def restart(self) -> Proc:
        """Stop (if running) and start again, waiting until it is ready."""
        self.stop()
        ready_before = self.log_text().count(" ready.")
        self.start()
        wait_until(lambda: self.log_text().count(" ready.") > ready_before or self.popen.poll() is not None,
                   timeout=60, what="process ready again")
        assert self.popen.poll() is None, self.log_text()[-3000:]
        return self


def start_worker(env: dict[str, str], *, concurrency: int = 2, name: str | None = None) -> Proc:
    name = name or f"test-{uuid.uuid4().hex[:6]}"
    log = ROOT / "var" / "test-logs" / f"worker-{name}.log"
    if log.exists():
        log.unlink()
    proc = Proc(
        [str(VENV_BIN / "celery"), "-A", "seckill_site", "worker", "-l", "info", "-n", f"{name}@%h",
         "--concurrency", str(concurrency), "--without-mingle", "--without-gossip", "-Q", env["SECKILL_QUEUE"]],
        env, log,
    ).start()
    wait_until(lambda: " ready." in proc.log_text() or proc.popen.poll() is not None, timeout=60,
               what="celery worker ready")
    assert proc.popen.poll() is None, proc.log_text()[-3000:]
    partitions = int(env.get("SECKILL_CONFIRM_PARTITIONS") or 1)
    wait_until(lambda: consumers_connected(proc) >= partitions, timeout=30,
               what=f"confirm consumer connected ({partitions} partition(s))")
    return proc


def consumers_connected(proc: Proc) -> int:
    """How many times the worker's confirm consumers connected (one line per partition each time)."""
    return sum(1 for line in proc.log_text().splitlines() if "confirm consumer" in line and " consuming " in line)


_session_workers: list[Proc] = []


@pytest.fixture(scope="session")
def worker(process_env):
    proc = start_worker(process_env, name="session")
    _session_workers.append(proc)
    yield proc
    proc.stop()


@contextlib.contextmanager
def workers_stopped():
    """The session's workers stopped for the block, then started again."""
    stopped = [w for w in _session_workers if w.popen and w.popen.poll() is None]
    for w in stopped:
        w.stop()
    try:
        yield
    finally:
        for w in stopped:
            w.restart()


@pytest.fixture
def no_worker():
    """No worker runs during the test (one started by earlier tests is stopped,
    then started again): the test plays the worker's part itself."""
    with workers_stopped():
        yield


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The web tier's entry points: the default server and the contract's gunicorn.
WEB_SERVERS = {
    "granian": [str(VENV_BIN / "python"), "-m", "seckill_site.serve"],
    "gunicorn": [str(VENV_BIN / "gunicorn"), "seckill_site.wsgi:application"],
}


def start_web(process_env, *, name: str = "web", server: str = "granian", workers: int = 3,
              port: int | None = None, target: str | None = None, **extra: str) -> Proc:
    """A real web tier on a free port (or `port`; the default server unless
    `server` says gunicorn; 3 worker processes, throttling off; the project's
    WSGI application unless `target` names another), `extra` added to its
    environment; returns once it listens (`.port`)."""
    port = port or free_port()
    env = dict(process_env, SECKILL_WEB_LISTEN=f"127.0.0.1:{port}", GUNICORN_BIND=f"127.0.0.1:{port}",
               WEB_CONCURRENCY=str(workers), SECKILL_THROTTLE_RATE="0", SECKILL_ORDER_CALLS_RATE="0")
    env.update(extra)  # a test may turn a rate back on
    args = list(WEB_SERVERS[server])
    if target:
        args = [a for a in args if a != "seckill_site.wsgi:application"] + [target]
    proc = Proc(args, env, ROOT / "var" / "test-logs" / f"{name}.log").start()

    def up() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            return False

    wait_until(lambda: up() or proc.popen.poll() is not None, timeout=30, what=f"{server} ({name}) listening")
    assert proc.popen.poll() is None, proc.log_text()[-3000:]
    proc.port, proc.server = port, server
    return proc


def running(pid: int) -> bool:
    """The process exists and has not exited (an exited one waits as a zombie
    until whoever adopted it reaps it, which is not ours to wait for)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def web_workers(proc: Proc) -> list[int]:
    """Pids of the web tier's worker processes (the server's children)."""
    out = subprocess.run(["pgrep", "-P", str(proc.popen.pid)], capture_output=True, text=True).stdout
    return sorted(int(x) for x in out.split())


@pytest.fixture(scope="session")
def web(process_env):
    # Throttling off here, as in the benchmark: some tests send one buyer's
    # requests in bulk on purpose (accounts/tests prove the throttle).
    proc = start_web(process_env)
    yield proc
    proc.stop()


# HAProxy in front of web instances (issue 21): the address it connects to them
# from, which the instances trust for X-Forwarded-For. Any 127/8 address is this
# machine's; a client connecting from 127.0.0.1 is then never taken for the proxy.
PROXY_SOURCE = "127.0.0.2"


def start_proxy(*webs: Proc, name: str = "haproxy", port: int | None = None, tls_edge: str = "") -> Proc:
    """HAProxy on a free port (or `port`) in front of `webs` (anything with a
    `.port` on 127.0.0.1), with the config scripts/up --cluster runs
    (scripts/haproxy-config from deploy/haproxy.cfg.in; `tls_edge` its
    SECKILL_PROXY_TLS_EDGE) and a runtime API socket (`.socket`); returns once
    every instance is UP."""
    port = port or free_port()
    logs = ROOT / "var" / "test-logs"
    logs.mkdir(parents=True, exist_ok=True)
    config, sock = logs / f"{name}.cfg", logs / f"{name}.sock"
    env = dict(os.environ, SECKILL_PROXY_LISTEN=f"127.0.0.1:{port}", SECKILL_PROXY_SOURCE=PROXY_SOURCE,
               SECKILL_PROXY_WEBS=" ".join(f"127.0.0.1:{w.port}" for w in webs),
               SECKILL_PROXY_STATS_SOCKET=str(sock), SECKILL_PROXY_TLS_EDGE=tls_edge)
    subprocess.run(["sh", str(ROOT / "scripts/haproxy-config"), str(ROOT / "deploy/haproxy.cfg.in"), str(config)],
                   env=env, check=True)
    subprocess.run(["haproxy", "-q", "-c", "-f", str(config)], check=True)
    proc = Proc(["haproxy", "-W", "-db", "-f", str(config)], dict(os.environ), logs / f"{name}.log").start()
    proc.port, proc.socket = port, sock
    wait_until(lambda: proc.popen.poll() is not None or set(proxy_servers(proc).values()) == {"UP"},
               timeout=30, what="HAProxy with every web instance UP")
    assert proc.popen.poll() is None, proc.log_text()[-3000:]
    return proc


def proxy_servers(proxy: Proc) -> dict[str, str]:
    """HAProxy's view of its web instances: {"web1": "UP", "web2": "DOWN", ...}
    (empty while its runtime API is not up yet); the benchmark's reading."""
    from benchmarks.harness.processes import proxy_servers as read

    return read(proxy)
