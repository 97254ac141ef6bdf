"""The probes (GET /api/v1/health, /reconciliation/metrics by bearer token)
skip the purchase path's gate so they answer under a full purchase load, and
have a bound of their own (SECKILL_WEB_PROBE_SLOTS per probe per process):
beyond it they are answered 503 `unavailable` at once, so a flood of them
holds a few threads and never every one. Proven on real servers (granian and
gunicorn), with requests held inside their gate by the test application
(testsupport.held_app), while purchases go through. A metrics request by
bearer token never loads a session; one without is gated like any page."""
from __future__ import annotations

import http.client
import json
import threading
import time
import uuid

import pytest

from testsupport import wait_until
from testsupport.held_app import TARGET
from testsupport.processes import start_web

pytestmark = pytest.mark.web

METRICS_TOKEN = "probe-metrics-" + "t0k" * 8
HOLD_S = 8  # long enough that "at once" (under HOLD_S / 2) holds on a loaded machine


def get(port: int, path: str, headers: dict | None = None, timeout: float = 30) -> tuple[int, dict, bytes, float]:
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read(), time.monotonic() - started
    finally:
        conn.close()


def buy(port: int, token: str, sku_id: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/api/v1/orders", json.dumps({"sku_id": sku_id, "quantity": 1}),
                     {"Authorization": f"Token {token}", "Content-Type": "application/json",
                      "Idempotency-Key": uuid.uuid4().hex})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def refused_at_once(answer) -> bool:
    """The bounded backlog's refusal (no health figures in it), long before a held request ends."""
    status, headers, body, took = answer
    headers = {k.lower(): v for k, v in headers.items()}
    return status == 503 and json.loads(body)["code"] == "unavailable" and headers.get("retry-after") == "1" \
        and "mysql" not in json.loads(body) and took < HOLD_S / 2


class Holds:
    """Requests held inside their gate for HOLD_S, each in a thread of its own."""

    def __init__(self, port: int, log, path: str, headers: dict, n: int):
        self.log, self.answers = log, []
        self.threads = [threading.Thread(target=lambda: self.answers.append(
            get(port, path, {**headers, "X-Test-Hold": str(HOLD_S)})), daemon=True) for _ in range(n)]

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def held(self) -> int:
        return len(self.log.read_text().splitlines()) if self.log.exists() else 0

    def __exit__(self, *exc):
        for t in self.threads:
            t.join(timeout=HOLD_S + 30)


@pytest.fixture(params=["granian", "gunicorn"])
def probe_web(request, process_env, tmp_path):
    log = tmp_path / "held.log"
    web = start_web(process_env, name=f"web-probes-{request.param}", server=request.param, workers=1,
                    target=TARGET, SECKILL_WEB_PROBE_SLOTS="2", SECKILL_METRICS_TOKEN=METRICS_TOKEN,
                    SECKILL_TEST_HOLD_LOG=str(log))
    web.hold_log = log
    yield web
    web.stop()


def test_a_flood_of_metrics_scrapes_holds_two_threads_and_purchases_go_through(probe_web, make_sku, make_buyers):
    port, bearer = probe_web.port, {"Authorization": f"Bearer {METRICS_TOKEN}"}
    sku = make_sku(stock=50, per_user_limit=50)
    (_, token), = make_buyers(1)
    assert get(port, "/reconciliation/metrics", bearer)[0] == 200
    with Holds(port, probe_web.hold_log, "/reconciliation/metrics", bearer, 6) as flood:
        wait_until(lambda: flood.held() >= 2 and len(flood.answers) >= 4, timeout=HOLD_S, what="two held, four refused")
        assert flood.held() == 2  # the bound: no third scrape got in
        assert all(refused_at_once(a) for a in flood.answers), flood.answers
        # another scrape, even with a wrong token (no MySQL asked), is refused at once too
        assert refused_at_once(get(port, "/reconciliation/metrics", bearer))
        assert refused_at_once(get(port, "/reconciliation/metrics", {"Authorization": "Bearer made-up"}))
        # meanwhile: purchases, the health check (a bound of its own) and a staff
        # browser's metrics request (session, not a probe: gated like any page)
        assert [buy(port, token, sku.sku_id) for _ in range(5)] == [202] * 5
        status, _, body, _ = get(port, "/api/v1/health")
        assert status in (200, 503) and "mysql" in json.loads(body), body  # its own verdict, not the refusal
        cookie = {"Cookie": f"sessionid={uuid.uuid4().hex}"}
        assert get(port, "/reconciliation/metrics", cookie)[0] == 403
    assert sorted(a[0] for a in flood.answers) == [200, 200, 503, 503, 503, 503]
    assert get(port, "/reconciliation/metrics", bearer)[0] == 200  # the slots came back


def test_a_flood_of_health_checks_is_bounded_and_leaves_the_scraper_its_own(probe_web, make_sku, make_buyers):
    port, bearer = probe_web.port, {"Authorization": f"Bearer {METRICS_TOKEN}"}
    sku = make_sku(stock=10, per_user_limit=10)
    (_, token), = make_buyers(1)
    with Holds(port, probe_web.hold_log, "/api/v1/health", {}, 4) as flood:
        wait_until(lambda: flood.held() >= 2 and len(flood.answers) >= 2, timeout=HOLD_S, what="two held, two refused")
        assert flood.held() == 2
        assert all(refused_at_once(a) for a in flood.answers), flood.answers
        assert refused_at_once(get(port, "/api/v1/health"))
        assert get(port, "/reconciliation/metrics", bearer)[0] == 200
        assert buy(port, token, sku.sku_id) == 202
    held = [a for a in flood.answers if not refused_at_once(a)]
    assert len(held) == 2 and all("mysql" in json.loads(a[2]) for a in held), flood.answers
    assert get(port, "/api/v1/health")[0] in (200, 503)


def test_a_probe_bound_below_one_stops_the_start():
    import os
    import subprocess

    from testsupport import ROOT, VENV_BIN

    run = subprocess.run([str(VENV_BIN / "python"), "-c", "import seckill_site.webserver"], cwd=ROOT,
                         env={**os.environ, "SECKILL_WEB_PROBE_SLOTS": "0"}, capture_output=True, text=True)
    assert run.returncode != 0 and "SECKILL_WEB_PROBE_SLOTS must be at least 1" in run.stderr
