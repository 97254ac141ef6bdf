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
# Selenium uses Debian's chromium and chromedriver: it must neither fetch a
# driver nor send usage statistics.
os.environ.setdefault("SE_AVOID_STATS", "true")
os.environ.setdefault("SE_OFFLINE", "true")


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
        # The test queues are the tests' own: delete them, so they are declared
        # again with exactly the arguments the code asks for.
        for queue in (settings.CELERY_QUEUE, settings.SECKILL_CONFIRM_QUEUE, settings.CELERY_DEAD_LETTER_QUEUE):
            try:
                conn.channel().queue_delete(queue)
            except Exception:  # not declared yet
                pass
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
        from benchmarks.harness import die_with_parent

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

    def restart(self) -> "Proc":
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
    wait_until(lambda: "confirm consumer" in proc.log_text() and " consuming " in proc.log_text(), timeout=30,
               what="confirm consumer connected")
    return proc


_session_workers: list[Proc] = []


@pytest.fixture(scope="session")
def worker(process_env):
    proc = start_worker(process_env, name="session")
    _session_workers.append(proc)
    yield proc
    proc.stop()


@pytest.fixture
def no_worker():
    """No worker runs during the test (one started by earlier tests is stopped,
    then started again): the test plays the worker's part itself."""
    stopped = [w for w in _session_workers if w.popen and w.popen.poll() is None]
    for w in stopped:
        w.stop()
    yield
    for w in stopped:
        w.restart()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_web(process_env, *, name: str = "web", **extra: str) -> Proc:
    """A real gunicorn on a free port (3 workers, throttling off), `extra`
    added to its environment; returns once it listens (`.port`)."""
    port = free_port()
    env = dict(process_env, GUNICORN_BIND=f"127.0.0.1:{port}", WEB_CONCURRENCY="3", SECKILL_THROTTLE_RATE="0",
               **extra)
    proc = Proc([str(VENV_BIN / "gunicorn"), "seckill_site.wsgi:application"], env,
                ROOT / "var" / "test-logs" / f"{name}.log").start()

    def up() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            return False

    wait_until(up, timeout=30, what=f"gunicorn ({name}) listening")
    proc.port = port
    return proc


@pytest.fixture(scope="session")
def web(process_env):
    # Throttling off here, as in the benchmark: some tests send one buyer's
    # requests in bulk on purpose (accounts/tests prove the throttle).
    proc = start_web(process_env)
    yield proc
    proc.stop()


def chromium(*, lang: str | None = None, prefs: dict | None = None):
    """Debian's headless Chromium, driven by Debian's chromedriver, sending no
    statistics; `lang` is the language it asks pages for, `prefs` more of its
    preferences (e.g. a download folder). Returns (driver, profile folder)."""
    import shutil
    import tempfile

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    profile = tempfile.mkdtemp(prefix="seckill-chromium-")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-quic", f"--user-data-dir={profile}", "--window-size=1400,1000"):
        options.add_argument(flag)
    prefs = dict(prefs or {})
    if lang:
        options.add_argument(f"--lang={lang}")
        prefs["intl.accept_languages"] = f"{lang},zh"
    if prefs:
        options.add_experimental_option("prefs", prefs)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"),
                              options=options)
    driver.implicitly_wait(5)
    return driver, profile


def chromium_quit(driver, profile: str) -> None:
    import shutil

    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def browser():
    driver, profile = chromium()
    yield driver
    chromium_quit(driver, profile)


def browser_login(driver, base: str, username: str, password: str) -> None:
    """Log in through the admin's login form, as a person does."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{base}/admin/login/")
    driver.find_element(By.NAME, "username").send_keys(username)
    driver.find_element(By.NAME, "password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    # the click does not wait for the login's redirect; the next get must not race it
    WebDriverWait(driver, 15).until(lambda d: "/admin/login/" not in d.current_url
                                    and d.execute_script("return document.readyState") == "complete")


def make_staff(group: str) -> tuple[str, str]:
    """A staff user in the ops or support group; returns (username, password)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    name = unique(group)
    user = get_user_model().objects.create_user(username=name, password="secret-pw", is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    return name, "secret-pw"


# --- factories ------------------------------------------------------------------

def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def make_sku(live_db):
    from inventory.services.skus import sku_create

    def make(*, stock: int = 10, per_user_limit: int = 1, **kw):
        return sku_create(sku_id=unique("T"), stock=stock, per_user_limit=per_user_limit, **kw)

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


# --- shared helpers (plain functions, imported by the tests) ------------------------

def reserve_direct(sku_id: str, user_id: int, qty: int = 1, key: str | None = None):
    """Take stock in the gate as the purchase path does, without publishing."""
    from inventory import redis_store

    oid = uuid.uuid4().hex
    key = key or uuid.uuid4().hex
    r = redis_store.reserve(sku_id=sku_id, user_id=user_id, quantity=qty, idempotency_key=key, order_id=oid)
    assert r.code is redis_store.Reserve.OK, r
    return redis_store.Reservation(oid, sku_id, user_id, qty, key, r.reserved_ms, r.epoch)


def fence_reached(sku_id: str) -> None:
    """Play the confirm consumer reaching the SKU's standing fence (for tests
    where nothing is left in the broker ahead of it): the snapshot is loaded."""
    from inventory import redis_store
    from inventory.services.skus import stock_fence_pass

    assert stock_fence_pass(sku_id=sku_id, token=redis_store.fence_token(sku_id=sku_id))


def rebuild_lost(sku_id: str) -> None:
    """Redis lost this SKU: it is fenced, then its fence is reached."""
    from inventory.services.skus import Warm, stock_warm

    assert stock_warm(sku_id=sku_id) is Warm.FENCED
    fence_reached(sku_id)


def publish(*reservations) -> None:
    """One confirm message per reservation, as the purchase path sends them."""
    from inventory import messages

    for r in reservations:
        messages.publish_confirms([r])


def rabbitmq_queue(name: str) -> dict:
    """A queue's figures as RabbitMQ reports them (messages, unacknowledged, consumers)."""
    import json

    out = subprocess.run(["rabbitmqctl", "list_queues", "-q", "--formatter", "json", "name", "messages",
                          "messages_unacknowledged", "consumers", "arguments"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    for q in json.loads(out):
        if q["name"] == name:
            return q
    return {}


class Http:
    """One keep-alive HTTP connection (per thread) to the test gunicorn."""

    def __init__(self, port: int):
        self.port = port
        self.conn = None

    def post_order(self, token: str, sku_id: str, qty: int, key: str) -> tuple[int, dict]:
        import http.client
        import json

        body = json.dumps({"sku_id": sku_id, "quantity": qty})
        headers = {"Authorization": f"Token {token}", "Content-Type": "application/json", "Idempotency-Key": key}
        for _ in range(3):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                self.conn.request("POST", "/api/v1/orders", body, headers)
                resp = self.conn.getresponse()
                return resp.status, json.loads(resp.read() or b"{}")
            except (ConnectionError, http.client.HTTPException):
                self.conn = None
        raise AssertionError("server kept dropping the connection")


def run_parallel(port: int, jobs: list[tuple[str, str, int, str]], threads: int = 32) -> list[tuple[int, dict]]:
    """POST orders (token, sku, quantity, key) over real HTTP from `threads` clients."""
    from concurrent.futures import ThreadPoolExecutor

    chunks = [jobs[i::threads] for i in range(threads)]

    def work(chunk):
        client = Http(port)
        return [client.post_order(*job) for job in chunk]

    with ThreadPoolExecutor(threads) as pool:
        return [r for part in pool.map(work, chunks) for r in part]


def sell(web_port: int, tokens: list[str], sku_id: str, n_threads: int = 24) -> list[tuple[int, dict]]:
    """Every token clicks once (quantity 1, a fresh key each)."""
    jobs = [(t, sku_id, 1, uuid.uuid4().hex) for t in tokens]
    return run_parallel(web_port, jobs, threads=n_threads)


def sell_during(fault: Callable[[], None], web_port: int, tokens: list[str], sku_id: str, n_threads: int = 24,
                after_taken: int = 10):
    """Run a sale and land `fault` in it: the fault starts once the gate has
    taken `after_taken` units, and the test fails if the sale was already over
    by then (the fault must land mid-sale)."""
    import threading

    from inventory import redis_store

    selling = threading.Event()
    started_mid_sale: list[bool] = []
    start = (redis_store.live_stock(sku_id=sku_id) or redis_store.LiveStock(0, 0, 0, 0, 0)).available

    def land() -> None:
        def under_way() -> bool:
            live = redis_store.live_stock(sku_id=sku_id)
            return live is not None and start - live.available >= after_taken

        wait_until(under_way, timeout=30, interval=0.01, what="the sale under way")
        started_mid_sale.append(selling.is_set())
        fault()

    t = threading.Thread(target=land)
    selling.set()
    t.start()
    try:
        results = sell(web_port, tokens, sku_id, n_threads=n_threads)
    finally:
        selling.clear()
        t.join()
    assert started_mid_sale == [True], "the fault did not land during the sale"
    return results


def accepted_ids(results) -> set[str]:
    return {b["order_id"] for s, b in results if s == 202}


class RowHold:
    """Hold a SKU's row lock from another connection, so the confirm consumer
    blocks in MySQL with its batch unacknowledged (a fault can then land on a
    consumer that really holds messages)."""

    def __init__(self, sku_id: str):
        import threading

        self.sku_id = sku_id
        self.held, self.release = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._hold, daemon=True)

    def _hold(self):
        from django.db import connection, transaction

        from inventory.models import Sku

        try:
            with transaction.atomic():
                Sku.objects.select_for_update().get(pk=self.sku_id)
                self.held.set()
                self.release.wait(60)
        finally:
            connection.close()

    def __enter__(self):
        self.thread.start()
        assert self.held.wait(10), "could not lock the SKU row"
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.thread.join(30)


def rabbitmq_restart() -> None:
    from benchmarks.faults import rabbitmq_restart as restart

    restart()


# --- assertions about both stores -----------------------------------------------------

def settled(sku_id: str, *, timeout: float = 30.0) -> None:
    """Wait until Redis has nothing in flight for the SKU."""
    from inventory import redis_store

    wait_until(lambda: (redis_store.live_stock(sku_id=sku_id) or redis_store.LiveStock(0, 0, 0, 0, 0)).inflight == 0
               and not redis_store.inflight_entries(sku_id=sku_id),
               timeout=timeout, what=f"nothing in flight for {sku_id}")


def assert_balanced(sku_id: str):
    """MySQL buckets add up, and Redis available equals MySQL available."""
    from inventory import redis_store
    from inventory.models import Sku

    sku = Sku.objects.get(pk=sku_id)
    assert sku.total_stock == sku.available_stock + sku.frozen_stock + sku.locked_stock + sku.sold_stock
    assert min(sku.available_stock, sku.frozen_stock, sku.locked_stock, sku.sold_stock) >= 0
    live = redis_store.live_stock(sku_id=sku_id)
    assert live is not None, "snapshot missing in Redis"
    assert live.inflight == 0
    assert live.available == sku.available_stock, (live, sku.available_stock)
    return sku


def decr_log_by_order(sku_id: str) -> dict[str, str]:
    from inventory.models import InventoryLog

    rows = InventoryLog.objects.filter(sku_id=sku_id, operation=InventoryLog.Operation.DECR)
    out: dict[str, str] = {}
    for order_id, status in rows.values_list("order_id", "status"):
        assert order_id not in out, f"two DECR rows for {order_id}"
        out[order_id] = status
    return out


def post_order(client, sku_id: str, key: str | None = None, qty: int = 1, **extra):
    """POST /api/v1/orders through a DRF test client; the response."""
    return client.post("/api/v1/orders", {"sku_id": sku_id, "quantity": qty}, format="json",
                       HTTP_IDEMPOTENCY_KEY=key or uuid.uuid4().hex, **extra)


def place(client, sku_id: str, key: str | None = None, qty: int = 1) -> str:
    """A purchase that must be accepted; its order id."""
    r = post_order(client, sku_id, key, qty)
    assert r.status_code == 202, r.content
    return r.json()["order_id"]


def confirmed(order_id: str) -> None:
    from orders.models import Order

    wait_until(lambda: Order.objects.filter(pk=order_id, status=Order.Status.PENDING_PAYMENT).exists(),
               what=f"order {order_id} confirmed")


def moves_applied(sku_id: str) -> None:
    """Until the mover applied every pay, cancel and expiry of the SKU to its row."""
    from orders.selectors import moves_pending

    wait_until(lambda: moves_pending(sku_ids=[sku_id]) == 0, what="order moves applied")


def gives_applied(sku_id: str) -> None:
    """Until every move of the SKU reached its row and every give reached Redis
    (log rows success, outbox sent)."""
    from inventory.models import InventoryLog, OutboxMessage

    moves_applied(sku_id)
    wait_until(lambda: not InventoryLog.objects.filter(sku_id=sku_id, status="pending")
               .exclude(operation="DECR").exists()
               and not OutboxMessage.objects.filter(sku_id=sku_id, sent_at__isnull=True).exists(),
               what="gives applied")
