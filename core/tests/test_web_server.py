"""The web tier's guarantees, under the default server (granian, through
seckill_site.serve) and under gunicorn (the contract's entry point), the same
on both: a SIGTERM answers every request in progress and loses nothing, a
killed worker process is replaced, the bounded backlog answers the excess 503
`unavailable` and takes nothing, keep-alive, access logs on request."""
from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import threading
import time
import uuid

import pytest

from testsupport import wait_until
from testsupport.processes import running, start_web, web_workers
from testsupport.stores import assert_balanced, every_unit_taken_is_a_202, settled

SERVERS = ("granian", "gunicorn")

pytestmark = pytest.mark.web


def _request(conn: http.client.HTTPConnection, method: str, path: str, token: str | None = None,
             body: dict | None = None, key: str | None = None) -> tuple[int, dict, dict]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Token {token}"
    if key:
        headers["Idempotency-Key"] = key
    conn.request(method, path, json.dumps(body) if body is not None else None, headers)
    resp = conn.getresponse()
    raw = resp.read()
    return resp.status, (json.loads(raw) if raw else {}), dict(resp.getheaders())


class Buyer(threading.Thread):
    """Clicks buy over one keep-alive connection until told to stop or the
    server goes away; records when each request was sent and what came back."""

    def __init__(self, port: int, token: str, sku_id: str, stop: threading.Event):
        super().__init__(daemon=True)
        self.port, self.token, self.sku_id, self.stop = port, token, sku_id, stop
        self.answers: list[tuple[int, dict]] = []
        self.unanswered: list[float] = []  # monotonic time each unanswered request was sent

    def run(self) -> None:
        conn = None
        while not self.stop.is_set():
            body = json.dumps({"sku_id": self.sku_id, "quantity": 1})
            headers = {"Authorization": f"Token {self.token}", "Content-Type": "application/json",
                       "Idempotency-Key": uuid.uuid4().hex}
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                    conn.connect()
            except OSError:
                return  # nothing listens any more: nothing was sent
            try:
                conn.request("POST", "/api/v1/orders", body, headers)
                sent = time.monotonic()
            except OSError:
                conn = None
                continue
            try:
                resp = conn.getresponse()
                self.answers.append((resp.status, json.loads(resp.read() or b"{}")))
            except (OSError, http.client.HTTPException):
                self.unanswered.append(sent)
                conn = None


@pytest.mark.parametrize("server", SERVERS)
def test_sigterm_answers_every_request_in_progress_and_every_unit_taken_is_a_202(
        server, process_env, worker, make_sku, make_buyers):
    # One process with one slot and a deep queue: at the signal most of the
    # buyers' requests are in progress, waiting in the gate or for the broker.
    web = start_web(process_env, name=f"web-sigterm-{server}", server=server, workers=1,
                    SECKILL_WEB_THREADS="1", SECKILL_WEB_QUEUE="64", SECKILL_WEB_QUEUE_WAIT_MS="10000")
    sku = make_sku(stock=5000, per_user_limit=10 ** 4)
    stop = threading.Event()
    buyers = [Buyer(web.port, token, sku.sku_id, stop) for _, token in make_buyers(32)]
    try:
        for b in buyers:
            b.start()
        wait_until(lambda: sum(len(b.answers) for b in buyers) >= 200, timeout=60, what="the sale under way")
        signalled = time.monotonic()
        os.killpg(web.popen.pid, signal.SIGTERM)
        web.popen.wait(timeout=30)
    finally:
        stop.set()
        web.stop(signal.SIGKILL)
    for b in buyers:
        b.join(timeout=30)

    answers = [a for b in buyers for a in b.answers]
    # A request on a keep-alive connection the server closed after the signal
    # may find nobody reading it; one sent before the signal was in progress.
    in_progress_dropped = [t for b in buyers for t in b.unanswered if t < signalled - 0.05]
    assert in_progress_dropped == [], f"{len(in_progress_dropped)} requests in progress got no answer"
    assert {s for s, _ in answers} <= {202, 503}, {s for s, _ in answers}
    accepted = {body["order_id"] for s, body in answers if s == 202}
    assert len(accepted) >= 200
    # every unit the gate took belongs to a 202 the buyer holds
    every_unit_taken_is_a_202(sku.sku_id, accepted)


@pytest.mark.parametrize("server", SERVERS)
def test_a_killed_worker_process_is_replaced_and_the_tier_keeps_answering(server, process_env):
    web = start_web(process_env, name=f"web-respawn-{server}", server=server, workers=2)
    try:
        wait_until(lambda: len(web_workers(web)) == 2, timeout=30, what="both workers forked")
        for kill in (1, 2):  # twice within seconds: no "crash loop" takes the tier down
            victim = web_workers(web)[0]
            os.kill(victim, signal.SIGKILL)
            wait_until(lambda gone=victim: len(web_workers(web)) == 2 and gone not in web_workers(web),
                       timeout=30, what=f"worker replaced after kill {kill}")
        assert web.popen.poll() is None
        # every process answers again (a dozen requests on fresh connections)
        statuses = set()
        for _ in range(12):
            conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
            statuses.add(_request(conn, "GET", "/api/v1/skus")[0])
            conn.close()
        assert statuses == {401}
    finally:
        web.stop()


@pytest.mark.parametrize("server", SERVERS)
def test_beyond_the_backlog_the_excess_is_answered_503_unavailable_and_takes_nothing(
        server, process_env, worker, make_sku, make_buyers):
    web = start_web(process_env, name=f"web-backlog-{server}", server=server, workers=1,
                    SECKILL_WEB_THREADS="1", SECKILL_WEB_QUEUE="2")
    sku = make_sku(stock=10 ** 5, per_user_limit=10 ** 5)
    stop = threading.Event()
    buyers = [Buyer(web.port, token, sku.sku_id, stop) for _, token in make_buyers(24)]
    health: list[int] = []
    try:
        for b in buyers:
            b.start()
        wait_until(lambda: sum(1 for b in buyers for s, _ in b.answers if s == 503) >= 50, timeout=60,
                   what="refusals")
        # the probe skips the gate: it answers in the flood
        conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
        health.append(_request(conn, "GET", "/api/v1/health")[0])
    finally:
        stop.set()
        for b in buyers:
            b.join(timeout=30)
        web.stop()
    answers = [a for b in buyers for a in b.answers]
    refused = [body for s, body in answers if s == 503]
    assert refused and all(body["code"] == "unavailable" for body in refused)
    assert {s for s, _ in answers} == {202, 503}
    assert health and health[0] in (200, 503)  # answered (its own verdict is about the stores)
    accepted = {body["order_id"] for s, body in answers if s == 202}
    every_unit_taken_is_a_202(sku.sku_id, accepted)  # the refused took nothing


@pytest.mark.parametrize("server", SERVERS)
def test_keep_alive_and_the_access_log_on_request(server, process_env):
    web = start_web(process_env, name=f"web-keepalive-{server}", server=server, workers=1,
                    SECKILL_WEB_ACCESS_LOG="1")
    try:
        conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
        conn.connect()
        local = conn.sock.getsockname()
        for _ in range(20):
            status, body, headers = _request(conn, "GET", "/api/v1/skus/NOPE-keepalive")
            assert status == 401 and body["code"] == "not_authenticated"
            assert headers.get("connection", headers.get("Connection", "")).lower() != "close"
        assert conn.sock.getsockname() == local  # one connection carried them all
        wait_until(lambda: web.log_text().count("/api/v1/skus/NOPE-keepalive") >= 20, timeout=10,
                   what="access log lines")
        assert " 401 " in web.log_text() or "401" in web.log_text().split("NOPE-keepalive")[1]
    finally:
        web.stop()


@pytest.mark.parametrize("server", SERVERS)
def test_no_access_log_unless_asked(server, process_env):
    web = start_web(process_env, name=f"web-quiet-{server}-{uuid.uuid4().hex[:4]}", server=server, workers=1)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
        assert _request(conn, "GET", "/api/v1/skus/NOPE-quiet")[0] == 401
        time.sleep(0.5)
        assert "NOPE-quiet" not in web.log_text()
    finally:
        web.stop()


@pytest.mark.parametrize("server", SERVERS)
def test_a_body_over_the_limit_is_413_before_it_is_read(server, process_env, make_sku, make_buyers):
    """Declared too large: refused on the header alone (the client has sent
    none of it). Sent chunked, with no length: Django's WSGI request reads no
    body without one, so it is refused as invalid. Neither takes anything."""
    import socket

    web = start_web(process_env, name=f"web-body-{server}", server=server, workers=1)
    sku = make_sku(stock=10)
    (_, token), = make_buyers(1)
    head = (f"POST /api/v1/orders HTTP/1.1\r\nHost: t\r\nAuthorization: Token {token}\r\n"
            f"Content-Type: application/json\r\nIdempotency-Key: {uuid.uuid4().hex}\r\n")
    try:
        with socket.create_connection(("127.0.0.1", web.port), timeout=10) as s:
            s.sendall((head + "Content-Length: 100000000\r\n\r\n" + '{"sku_id": "').encode())
            answer = ""
            while "too_large" not in answer:  # gunicorn sends the body as a chunk after the head
                part = s.recv(4096).decode()
                if not part:
                    break
                answer += part
        assert answer.startswith("HTTP/1.1 413") and '"code":"too_large"' in answer.replace(" ", ""), answer
        with socket.create_connection(("127.0.0.1", web.port), timeout=10) as s:
            s.sendall((head + "Transfer-Encoding: chunked\r\n\r\n").encode())
            chunk = b"x" * 65536
            answer = b""
            try:
                for _ in range(64):  # 4 MiB offered, far past the limit
                    s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except OSError:
                pass  # the server answered and closed while we were still sending
            s.settimeout(10)
            with contextlib.suppress(OSError):
                answer = s.recv(4096)
        assert answer.startswith((b"HTTP/1.1 400", b"HTTP/1.1 413")), answer[:200]
        settled(sku.sku_id)
        assert assert_balanced(sku.sku_id).locked_stock == 0
    finally:
        web.stop()


def test_a_client_that_never_finishes_its_header_is_dropped(process_env):
    """granian closes a connection whose header is not complete within the
    keep-alive time (a slow client cannot hold the process's attention)."""
    import socket

    from seckill_site import webserver

    web = start_web(process_env, name="web-slow-header", workers=1)
    try:
        with socket.create_connection(("127.0.0.1", web.port), timeout=webserver.HEADER_TIMEOUT_S + 10) as s:
            s.sendall(b"GET /api/v1/skus HTTP/1.1\r\nHost: t\r\n")  # and never the blank line
            started = time.monotonic()
            try:
                rest = s.recv(4096)
            except ConnectionResetError:
                rest = b""
            waited = time.monotonic() - started
        assert not rest.startswith(b"HTTP/1.1 2"), rest
        assert waited < webserver.HEADER_TIMEOUT_S + 5
    finally:
        web.stop()


@pytest.mark.parametrize("server", SERVERS)
def test_mysql_connections_follow_the_requests_running_not_the_threads(server, process_env, make_buyers):
    """A process has dozens of threads (76 by default); its MySQL connections stay near
    the requests it runs at once (core.connections), whatever thread serves."""
    import MySQLdb
    from django.db import connection

    user = f"webconn_{uuid.uuid4().hex[:6]}"
    db = connection.settings_dict["NAME"]
    root = MySQLdb.connect(host="127.0.0.1", user="root", passwd="", port=3306)
    cur = root.cursor()
    cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY ''")
    cur.execute(f"CREATE USER '{user}'@'localhost' IDENTIFIED BY ''")
    cur.execute(f"GRANT ALL PRIVILEGES ON `{db}`.* TO '{user}'@'%'")
    cur.execute(f"GRANT ALL PRIVILEGES ON `{db}`.* TO '{user}'@'localhost'")
    slots = 3
    web = start_web(process_env, name=f"web-conns-{server}", server=server, workers=1,
                    SECKILL_WEB_THREADS=str(slots), SECKILL_WEB_QUEUE="40",
                    DATABASE_URL=f"mysql://{user}:@127.0.0.1:3306/{db}")
    tokens = [token for _, token in make_buyers(30)]
    stop = threading.Event()
    peak = [0]

    def read_orders(token: str) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=30)
        while not stop.is_set():
            assert _request(conn, "GET", "/api/v1/orders", token)[0] == 200

    def count() -> int:
        cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = %s", [user])
        return cur.fetchone()[0]

    threads = [threading.Thread(target=read_orders, args=(t,), daemon=True) for t in tokens]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            peak[0] = max(peak[0], count())
            time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
        web.stop()
        cur.execute(f"DROP USER '{user}'@'%'")
        cur.execute(f"DROP USER '{user}'@'localhost'")
        root.close()
    # 30 clients at once on a process of 47 threads: per-thread connections
    # would reach 30; lent ones stay at the slots (the health probe and a
    # refusal use none; a little slack for a request between give and take).
    assert 1 <= peak[0] <= slots + 2, peak[0]


def test_the_workers_stop_when_the_main_process_is_killed_and_the_port_is_free_again(process_env):
    """SIGKILL of the launcher's main process runs no shutdown: the kernel
    stops its workers, so nothing serves on unmanaged and the next start gets
    the port."""
    web = start_web(process_env, name="web-orphans", workers=2)
    port = web.port
    try:
        wait_until(lambda: len(web_workers(web)) == 2, timeout=30, what="both workers forked")
        workers = web_workers(web)
        os.kill(web.popen.pid, signal.SIGKILL)
        web.popen.wait(timeout=10)

        wait_until(lambda: not any(running(pid) for pid in workers), timeout=30, what="the orphaned workers gone")
    finally:
        web.stop(signal.SIGKILL)
    again = start_web(process_env, name="web-orphans-again", workers=1, port=port)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        assert _request(conn, "GET", "/api/v1/skus")[0] == 401
    finally:
        again.stop()


def test_a_second_server_on_a_taken_port_refuses_to_start(process_env):
    """granian's listener would share the port with the server already there
    (SO_REUSEPORT) and split the connections between the two; the launcher
    refuses instead, as gunicorn does."""
    import subprocess

    from testsupport import VENV_BIN

    web = start_web(process_env, name="web-taken-port", workers=1)
    try:
        second = subprocess.run([str(VENV_BIN / "python"), "-m", "seckill_site.serve"], capture_output=True,
                                text=True, timeout=60,
                                env=dict(process_env, SECKILL_WEB_LISTEN=f"127.0.0.1:{web.port}"))
        assert second.returncode != 0 and "already in use" in second.stderr, second.stderr[-500:]
        conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
        assert _request(conn, "GET", "/api/v1/skus")[0] == 401  # the first one serves on, alone
    finally:
        web.stop()


@pytest.mark.parametrize("server", SERVERS)
def test_a_web_tier_that_could_pass_mariadb_max_connections_refuses_to_start(process_env, live_db, server):
    """Both servers ask MariaDB for max_connections once at start, before any
    worker exists: processes x slots + the worker's threads past it is an exit
    with the sum and the settings that make it; within it, the server starts
    (every other test here)."""
    import subprocess

    from django.db import connection

    from testsupport import ROOT
    from testsupport.processes import WEB_SERVERS, free_port

    with connection.cursor() as cursor:
        cursor.execute("SELECT @@max_connections")
        allowed = cursor.fetchone()[0]
    port = free_port()
    env = dict(process_env, WEB_CONCURRENCY="2", SECKILL_WEB_THREADS=str(allowed // 2 + 1),
               SECKILL_WEB_LISTEN=f"127.0.0.1:{port}", GUNICORN_BIND=f"127.0.0.1:{port}")
    out = subprocess.run(WEB_SERVERS[server], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stdout + out.stderr[-2000:]
    [line] = [x for x in out.stderr.splitlines() if "MySQL connections" in x]
    assert f"more than MariaDB's max_connections ({allowed})" in line, line
    for name in ("WEB_CONCURRENCY", "SECKILL_WEB_THREADS", "SECKILL_WORKER_CONCURRENCY"):
        assert name in line, line
    assert "Booting worker" not in out.stderr and "Spawning worker" not in out.stderr  # refused before any


def test_the_connection_sum_counts_web_processes_slots_and_the_worker(monkeypatch, settings):
    from seckill_site import capacity, webserver

    monkeypatch.setattr(webserver, "WORKERS", 3)
    monkeypatch.setattr(webserver, "SLOTS", 32)
    monkeypatch.setattr(webserver, "PROBE_SLOTS", 2)
    settings.CELERY_WORKER_CONCURRENCY, settings.SECKILL_CONFIRM_PARTITIONS = 4, 2
    needed, how = capacity.connections_needed()
    # each process: its slots and the two probes' slots; the mover and beat one each
    assert needed == 3 * (32 + 2 * 2) + 4 + 2 + 1 + 1
    assert "3 web processes (WEB_CONCURRENCY) x (32 requests" in how and "SECKILL_WEB_PROBE_SLOTS" in how
