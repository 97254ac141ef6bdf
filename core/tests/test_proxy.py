"""Several web instances behind HAProxy (issue 21), with the config scripts/up
--cluster runs (deploy/haproxy.cfg.in): a sale through the proxy loses nothing
when one instance is SIGKILLed in the middle of it, the other serves on, and
the client address the instances see is the one the proxy forwarded."""
from __future__ import annotations

import http.client
import json
import os
import random
import shutil
import signal
import threading
import time
import uuid

import pytest

from testsupport import wait_until
from testsupport.processes import PROXY_SOURCE, proxy_servers, start_proxy, start_web
from testsupport.stores import assert_balanced, confirmed, decr_log_by_order, settled

pytestmark = [
    pytest.mark.proxy, pytest.mark.web,
    pytest.mark.skipif(shutil.which("haproxy") is None,
                       reason="needs HAProxy (scripts/test installs it: ensure_haproxy in scripts/lib.sh)"),
]


class Buyer(threading.Thread):
    """Clicks buy through the proxy over one keep-alive connection until told
    to stop; records what came back and when, and requests left unanswered."""

    def __init__(self, port: int, token: str, sku_id: str, stop: threading.Event):
        super().__init__(daemon=True)
        self.port, self.token, self.sku_id, self.stop = port, token, sku_id, stop
        self.answers: list[tuple[float, int, dict]] = []  # (monotonic time answered, status, body)
        self.unanswered = 0

    def run(self) -> None:
        conn = None
        while not self.stop.is_set():
            body = json.dumps({"sku_id": self.sku_id, "quantity": 1})
            headers = {"Authorization": f"Token {self.token}", "Content-Type": "application/json",
                       "Idempotency-Key": uuid.uuid4().hex}
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                conn.request("POST", "/api/v1/orders", body, headers)
                resp = conn.getresponse()
                raw = resp.read()
                self.answers.append((time.monotonic(), resp.status, json.loads(raw) if raw else {}))
                if resp.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException):
                self.unanswered += 1
                conn = None
                time.sleep(0.05)


def posts_served(web) -> int:
    """POST orders an instance answered, by its access log (SECKILL_WEB_ACCESS_LOG)."""
    return web.log_text().count("POST /api/v1/orders")


def test_one_web_instance_killed_mid_sale_behind_the_proxy_costs_only_its_in_flight_requests(
        process_env, worker, make_sku, make_buyers):
    from reconciliation.services import orphans_recover

    webs = [start_web(process_env, name=f"web-proxy-{n}", workers=1, SECKILL_WEB_ACCESS_LOG="1",
                      SECKILL_TRUSTED_PROXIES=PROXY_SOURCE) for n in (1, 2)]
    proxy = None
    stock = 600
    sku = make_sku(stock=stock, per_user_limit=10 ** 4)
    stop = threading.Event()
    buyers: list[Buyer] = []
    try:
        proxy = start_proxy(*webs, name="haproxy-sale")
        buyers = [Buyer(proxy.port, token, sku.sku_id, stop) for _, token in make_buyers(12)]
        for b in buyers:
            b.start()
        # both instances serve before the kill: the proxy balances
        wait_until(lambda: min(posts_served(w) for w in webs) >= 40, timeout=60, what="both instances selling")
        served_by_survivor = posts_served(webs[1])
        killed_at = time.monotonic()
        os.killpg(webs[0].popen.pid, signal.SIGKILL)
        webs[0].popen.wait(timeout=10)
        wait_until(lambda: proxy_servers(proxy).get("web1") == "DOWN", timeout=15, what="web1 taken out")
        sold_out = lambda: any(s == 409 and b.get("code") == "sold_out"  # noqa: E731
                               for bu in buyers for t, s, b in bu.answers if t > killed_at)
        wait_until(sold_out, timeout=60, what="the sale sold out after the kill")
    finally:
        stop.set()
        for b in buyers:  # their last requests answered before anything stops
            b.join(timeout=30)
        for w in webs:
            w.stop(signal.SIGKILL)
        if proxy:
            proxy.stop()

    answers = [(t, s, body) for b in buyers for t, s, body in b.answers]
    after = [(s, body) for t, s, body in answers if t > killed_at]
    # the survivor went on: its own access log grew, 202s kept coming, and the
    # proxy never had nowhere to send a request (no 503 of its own)
    assert posts_served(webs[1]) > served_by_survivor
    assert sum(1 for s, _ in after if s == 202) >= 1
    assert not [b for _, s, b in answers if s == 503 and "No web instance" in b.get("detail", "")]
    # only requests in flight at the killed instance were lost (502: outcome
    # unknown), at most one per buyer connection; a connect that failed went to
    # the other instance (retry-on conn-failure), never to the client
    lost = [b for _, s, b in answers if s == 502]
    assert all(b["code"] == "upstream_lost" for b in lost)
    assert len(lost) + sum(b.unanswered for b in buyers) <= len(buyers)
    assert {s for _, s, _ in answers} <= {202, 409, 502, 503}, {s for _, s, _ in answers}

    accepted = {b["order_id"] for _, s, b in answers if s == 202}
    # a unit taken by a request the kill cut off comes back through the orphan sweep
    deadline = time.monotonic() + 60
    from inventory.redis import gate

    while time.monotonic() < deadline and gate.inflight_entries(sku_id=sku.sku_id):
        orphans_recover(sku_ids=[sku.sku_id], ahead_s=15)
        time.sleep(1)
    for order_id in accepted:
        confirmed(order_id)  # every 202 became an order
    settled(sku.sku_id)
    taken = decr_log_by_order(sku.sku_id)
    assert accepted <= set(taken)
    # units taken without a 202 are the cut-off requests' own (each buyer's order, found by its key)
    assert len(set(taken) - accepted) <= len(lost) + sum(b.unanswered for b in buyers)
    row = assert_balanced(sku.sku_id)  # no oversell: the buckets add up and Redis agrees
    assert row.locked_stock == len(taken) == stock


def _from(address: str, port: int, token: str, sku_id: str, forwarded: str | None = None) -> int:
    """POST orders through the proxy from a client bound to `address` (any 127/8
    address is this machine's); its status."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(address, 0))
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json",
               "Idempotency-Key": uuid.uuid4().hex}
    if forwarded:
        headers["X-Forwarded-For"] = forwarded
    try:
        conn.request("POST", "/api/v1/orders", json.dumps({"sku_id": sku_id, "quantity": 1}), headers)
        return conn.getresponse().status
    finally:
        conn.close()


def test_the_instances_see_the_client_address_the_proxy_forwarded(process_env, make_sku):
    """The unknown-token limit counts per client address (issue 14): behind the
    proxy each client is counted as itself, not as the proxy, and an address a
    client writes into X-Forwarded-For itself is not believed."""
    def some_loopback() -> str:
        return f"127.{random.randint(1, 254)}.{random.randint(0, 254)}.{random.randint(3, 254)}"

    flooder, other = some_loopback(), some_loopback()
    sku = make_sku(stock=5)
    limit = 3
    webs = [start_web(process_env, name=f"web-forwarded-{n}", workers=1, SECKILL_TRUSTED_PROXIES=PROXY_SOURCE,
                      SECKILL_AUTH_FAILURES_PER_MINUTE=str(limit)) for n in (1, 2)]
    proxy = None
    try:
        proxy = start_proxy(*webs, name="haproxy-forwarded")
        bogus = lambda: uuid.uuid4().hex  # noqa: E731  (a token nobody has)
        # over both instances (the count is in Redis): the flooder's own limit
        codes = [_from(flooder, proxy.port, bogus(), sku.sku_id) for _ in range(limit + 2)]
        assert codes == [401] * limit + [429] * 2
        # another client is not the flooder, even when it names the flooder's address
        # (the proxy appends the address it saw; the instances read from the right)
        assert _from(other, proxy.port, bogus(), sku.sku_id) == 401
        assert _from(other, proxy.port, bogus(), sku.sku_id, forwarded=flooder) == 401
        # and the flooder cannot escape by naming someone else
        assert _from(flooder, proxy.port, bogus(), sku.sku_id, forwarded=other) == 429
        # a client reaching an instance directly is not the proxy: its header is its own text
        direct = some_loopback()
        conn_codes = []
        for _ in range(limit + 1):
            conn = http.client.HTTPConnection("127.0.0.1", webs[0].port, timeout=10, source_address=(direct, 0))
            conn.request("POST", "/api/v1/orders", json.dumps({"sku_id": sku.sku_id, "quantity": 1}),
                         {"Authorization": f"Token {bogus()}", "Content-Type": "application/json",
                          "Idempotency-Key": uuid.uuid4().hex, "X-Forwarded-For": some_loopback()})
            conn_codes.append(conn.getresponse().status)
            conn.close()
        assert conn_codes == [401] * limit + [429]
    finally:
        for w in webs:
            w.stop()
        if proxy:
            proxy.stop()


def test_the_generated_config_is_the_templates_with_every_setting_filled(tmp_path):
    """scripts/haproxy-config: every @NAME@ filled in, one server line per
    instance, an unset source or stats socket leaves its line out, and HAProxy
    accepts the result."""
    import subprocess

    from testsupport import ROOT

    out = tmp_path / "haproxy.cfg"
    env = dict(os.environ, SECKILL_PROXY_WEBS="127.0.0.1:8001, 127.0.0.1:8002 web-3:8000",
               SECKILL_PROXY_LISTEN="127.0.0.1:18000")
    env.pop("SECKILL_PROXY_SOURCE", None)
    env.pop("SECKILL_PROXY_STATS_SOCKET", None)
    subprocess.run(["sh", "scripts/haproxy-config", "deploy/haproxy.cfg.in", str(out)], cwd=ROOT, env=env,
                   check=True)
    lines = [line.strip() for line in out.read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    assert not [line for line in lines if "@" in line]
    assert [line for line in lines if line.startswith("server ")] == [
        "server web1 127.0.0.1:8001", "server web2 127.0.0.1:8002", "server web3 web-3:8000"]
    assert "bind 127.0.0.1:18000" in lines
    assert not [line for line in lines if line.startswith(("source ", "stats socket"))]
    # the purchase path's rules (see the template): checks that count 503 as up,
    # retries only of connections that failed, forwarded addresses
    assert "http-check expect rstatus ^(200|503)$" in lines
    assert "retry-on conn-failure" in lines
    assert "option forwardfor" not in lines  # one X-Forwarded-For line of the proxy's making instead
    assert "acl from_tls_edge always_false" in lines  # no TLS proxy named: nobody's X-Forwarded-Proto is kept
    assert subprocess.run(["haproxy", "-q", "-c", "-f", str(out)], capture_output=True).returncode == 0
    empty = subprocess.run(["sh", "scripts/haproxy-config", "deploy/haproxy.cfg.in", str(tmp_path / "x.cfg")],
                           cwd=ROOT, env=dict(env, SECKILL_PROXY_WEBS=" , "), capture_output=True, text=True)
    assert empty.returncode == 2 and "SECKILL_PROXY_WEBS is empty" in empty.stderr


def test_a_web_that_answers_health_503_stays_in_and_one_that_stops_answering_goes(process_env, no_worker):
    """The check's rule: 503 from /api/v1/health (a shared part is down, here the
    confirm consumer: no worker runs) keeps the instance in; a stopped one is
    taken out and the proxy answers the contract's 503 once none is left."""
    webs = [start_web(process_env, name=f"web-check-{n}", workers=1) for n in (1, 2)]
    proxy = None
    try:
        def health() -> int:
            conn = http.client.HTTPConnection("127.0.0.1", webs[0].port, timeout=10)
            conn.request("GET", "/api/v1/health", headers={"Host": "localhost"})
            return conn.getresponse().status

        wait_until(lambda: health() == 503, timeout=15, what="health 503 (no confirm consumer alive)")
        proxy = start_proxy(*webs, name="haproxy-check")  # returns once both are UP
        time.sleep(2.5)  # more than `fall 2` checks 1 s apart
        assert set(proxy_servers(proxy).values()) == {"UP"}
        for w in webs:
            w.stop(signal.SIGKILL)
        wait_until(lambda: set(proxy_servers(proxy).values()) == {"DOWN"}, timeout=15, what="both taken out")
        c = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        c.request("GET", "/api/v1/skus")
        resp = c.getresponse()
        assert resp.status == 503 and resp.getheader("Retry-After") == "1"
        assert json.loads(resp.read())["code"] == "unavailable"
    finally:
        for w in webs:
            w.stop()
        if proxy:
            proxy.stop()



class HeaderRecorder:
    """A backend that answers 200 to everything and keeps, per request path,
    every header line as it arrived (the proxy's own checks included): what a
    web instance behind HAProxy is sent, before any server joins lines."""

    def __init__(self):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        seen = self.seen = {}

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                seen.setdefault(self.path, []).append(list(self.headers.items()))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_POST = do_GET

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def headers(self, path: str, name: str) -> list[list[str]]:
        """Per request to `path`, the values of every `name` line it carried."""
        return [[v for k, v in request if k.lower() == name.lower()] for request in self.seen.get(path, [])]


def _get(port: int, path: str, source: str, headers: dict[str, str]) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    try:
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def test_the_proxy_sets_x_forwarded_proto_itself_and_sends_one_x_forwarded_for():
    """A client's X-Forwarded-Proto never reaches the instances (the production
    settings would take "https" from it): the proxy writes "http" for a plain
    connection. Only the TLS proxy named in front (SECKILL_PROXY_TLS_EDGE) is
    believed. X-Forwarded-For arrives as one line, the client's own text first
    and the proxy's peer last, never as a second line."""
    client, edge = "127.0.7.9", "127.0.8.8"
    backend = HeaderRecorder()
    proxy = None
    try:
        proxy = start_proxy(backend, name="haproxy-headers", tls_edge=f"{edge}, 127.0.9.0/24")
        assert _get(proxy.port, "/plain", client, {}) == 200
        assert _get(proxy.port, "/lying", client, {"X-Forwarded-Proto": "https",
                                                    "X-Forwarded-For": "198.51.100.7"}) == 200
        assert _get(proxy.port, "/edge", edge, {"X-Forwarded-Proto": "https",
                                                "X-Forwarded-For": "203.0.113.5"}) == 200
        assert _get(proxy.port, "/edge-silent", "127.0.9.4", {}) == 200
        # a client that sends the header twice: one line still, ending with its address
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10, source_address=(client, 0))
        conn.putrequest("GET", "/twice")
        conn.putheader("X-Forwarded-For", "192.0.2.1")
        conn.putheader("X-Forwarded-For", "192.0.2.2")
        conn.endheaders()
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        if proxy:
            proxy.stop()
        backend.stop()
    assert backend.headers("/plain", "X-Forwarded-Proto") == [["http"]]
    assert backend.headers("/lying", "X-Forwarded-Proto") == [["http"]]
    assert backend.headers("/edge", "X-Forwarded-Proto") == [["https"]]
    assert backend.headers("/edge-silent", "X-Forwarded-Proto") == [["http"]]
    assert backend.headers("/plain", "X-Forwarded-For") == [[client]]
    assert backend.headers("/lying", "X-Forwarded-For") == [[f"198.51.100.7,{client}"]]
    assert backend.headers("/edge", "X-Forwarded-For") == [[f"203.0.113.5,{edge}"]]
    assert backend.headers("/twice", "X-Forwarded-For") == [[f"192.0.2.2,{client}"]]
