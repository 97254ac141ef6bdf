"""Shared fixtures: the real MariaDB, Redis and RabbitMQ, and real worker/web processes.

Tests share one test database without per-test flushes (the worker and web
processes must see committed rows), so every test makes its own SKUs and buyers
with unique ids.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parent
VENV_BIN = Path(sys.executable).parent


def wait_until(cond: Callable[[], object], *, timeout: float = 20.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = cond()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last value {last!r})")


@pytest.fixture(scope="session", autouse=True)
def _clean_stores():
    from django.conf import settings
    from django_redis import get_redis_connection

    get_redis_connection("default").flushdb()
    from seckill_site.celery import app

    with app.connection_for_write() as conn:
        channel = conn.default_channel
        for queue in (settings.CELERY_QUEUE, settings.CELERY_DEAD_LETTER_QUEUE):
            try:
                channel.queue_purge(queue)
            except Exception:  # not declared yet: nothing to purge
                channel = conn.channel()
    yield


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


@pytest.fixture(scope="session")
def process_env(django_db_setup, django_db_blocker) -> dict[str, str]:
    from django.conf import settings
    from django.db import connection

    with django_db_blocker.unblock():
        name = connection.settings_dict["NAME"]
    assert name.startswith("test_"), name
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="seckill_site.settings.test",
        DATABASE_URL=f"mysql://root:@127.0.0.1:3306/{name}",
        REDIS_URL=settings.REDIS_URL,
        SECKILL_QUEUE=settings.CELERY_QUEUE,
        PYTHONUNBUFFERED="1",
    )
    return env


class Proc:
    def __init__(self, args: list[str], env: dict[str, str], log: Path):
        self.args, self.env, self.log = args, env, log
        self.popen: subprocess.Popen | None = None

    def start(self) -> "Proc":
        self.log.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.log, "ab")
        self.popen = subprocess.Popen(self.args, env=self.env, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT,
                                      start_new_session=True)
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
    return proc


@pytest.fixture(scope="session")
def worker(process_env):
    proc = start_worker(process_env, name="session")
    yield proc
    proc.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def web(process_env):
    port = free_port()
    env = dict(process_env, GUNICORN_BIND=f"127.0.0.1:{port}", WEB_CONCURRENCY="3")
    proc = Proc([str(VENV_BIN / "gunicorn"), "seckill_site.wsgi:application"], env,
                ROOT / "var" / "test-logs" / "web.log").start()

    def up() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            return False

    wait_until(up, timeout=30, what="gunicorn listening")
    proc.port = port
    yield proc
    proc.stop()


# --- factories ------------------------------------------------------------------

def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def make_sku(live_db):
    from inventory import services

    def make(*, stock: int = 10, per_user_limit: int = 1, **kw):
        return services.sku_create(sku_id=unique("T"), stock=stock, per_user_limit=per_user_limit, **kw)

    return make


@pytest.fixture
def make_buyers(live_db):
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    def make(n: int = 1, *, staff: bool = False) -> list[tuple[object, str]]:
        User = get_user_model()
        out = []
        for _ in range(n):
            user = User.objects.create(username=unique("buyer"), is_staff=staff)
            out.append((user, Token.objects.create(user=user).key))
        return out

    return make


@pytest.fixture
def api():
    from rest_framework.test import APIClient

    def client(token: str | None = None) -> APIClient:
        c = APIClient()
        if token:
            c.credentials(HTTP_AUTHORIZATION=f"Token {token}")
        return c

    return client
