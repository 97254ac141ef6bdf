"""The purchase path's metrics (core.metrics): counted in every web worker process,
summed across them at /reconciliation/metrics, next to the reconciliation gauges."""
from __future__ import annotations

import http.client
import re
import uuid

import pytest
from django.test import Client

from testsupport import ROOT
from testsupport.http import post_order, run_parallel

SAMPLE = re.compile(r"^(?P<name>[a-z_]+)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$", re.M)


def samples(text: str) -> dict[str, float]:
    """`name{labels}` -> value, for every sample line of a scrape."""
    return {m["name"] + (f"{{{m['labels']}}}" if m["labels"] else ""): float(m["value"])
            for m in SAMPLE.finditer(text)}


def purchases(figures: dict[str, float], outcome: str) -> float:
    return figures.get(f'seckill_purchase_total{{outcome="{outcome}"}}', 0.0)


def staff_session_cookie(make_buyers) -> str:
    """A staff user's session, stored where the web workers read it too;
    the user may view reconciliation reports (the metrics view asks for it)."""
    from django.contrib.auth.models import Permission

    (user, _), = make_buyers(1, staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_reconciliationrun"))
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


def scrape(port: int, headers: dict[str, str]) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/reconciliation/metrics", headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


@pytest.mark.web
def test_purchase_counters_are_summed_across_the_web_workers(web, make_sku, make_buyers):
    cookie = staff_session_cookie(make_buyers)
    status, before_text = scrape(web.port, {"Cookie": cookie})
    assert status == 200, before_text
    before = samples(before_text)

    stock, clicks = 7, 40
    sku = make_sku(stock=stock, per_user_limit=1)
    buyers = [token for _, token in make_buyers(clicks)]
    # 16 keep-alive connections over 3 worker processes: every worker takes some.
    results = run_parallel(web.port, [(t, sku.sku_id, 1, uuid.uuid4().hex) for t in buyers], threads=16)
    codes = [s if s == 202 else body.get("code") for s, body in results]
    assert codes.count(202) == stock and codes.count("sold_out") == clicks - stock, codes

    status, text = scrape(web.port, {"Cookie": cookie})
    assert status == 200
    after = samples(text)
    assert purchases(after, "accepted") - purchases(before, "accepted") == stock
    assert purchases(after, "sold_out") - purchases(before, "sold_out") == clicks - stock
    assert (after["seckill_purchase_seconds_count"] - before.get("seckill_purchase_seconds_count", 0)
            == clicks)
    assert after['seckill_purchase_seconds_bucket{le="+Inf"}'] == after["seckill_purchase_seconds_count"]
    # The reconciliation lines are still there, and still guarded.
    assert "seckill_reconciliation_runs_total" in text and "seckill_dead_letters" in text
    assert scrape(web.port, {})[0] == 403
    assert scrape(web.port, {"Authorization": "Bearer nope"})[0] == 403
    # The workers ran in multiprocess mode: the directory the server chose
    # for this address holds their files, one set per worker process.
    files = list((ROOT / "var" / "prometheus" / f"127.0.0.1_{web.port}").glob("counter_*.db"))
    assert files, "no multiprocess files: the workers counted in memory"


@pytest.mark.web
def test_every_refusal_has_an_outcome(web, make_sku, make_buyers):
    """A refused request is counted by its code; codes outside the named
    outcomes (here a body that is not valid) fall under "error"."""
    cookie = staff_session_cookie(make_buyers)
    before = samples(scrape(web.port, {"Cookie": cookie})[1])
    sku = make_sku(stock=5, per_user_limit=1)
    (_, token), = make_buyers(1)
    key = uuid.uuid4().hex
    jobs = [(token, sku.sku_id, 1, key), (token, sku.sku_id, 1, key),  # accepted, then replayed
            (token, sku.sku_id, 1, uuid.uuid4().hex),  # limit_reached
            (token, sku.sku_id, 0, uuid.uuid4().hex)]  # invalid -> error
    results = run_parallel(web.port, jobs, threads=1)
    assert [s for s, _ in results] == [202, 202, 409, 400], results
    after = samples(scrape(web.port, {"Cookie": cookie})[1])
    moved = {o: purchases(after, o) - purchases(before, o)
             for o in ("accepted", "replayed", "limit_reached", "error", "sold_out")}
    assert moved == {"accepted": 1, "replayed": 1, "limit_reached": 1, "error": 1, "sold_out": 0}


def test_metrics_work_in_one_process_too(live_db, make_sku, make_buyers, api, settings):
    """Without PROMETHEUS_MULTIPROC_DIR (manage.py, this test process) the
    metrics live in the process's own registry, served by the same view."""
    settings.SECKILL_METRICS_TOKEN = "t0ken"

    def scrape_here() -> dict[str, float]:
        response = Client().get("/reconciliation/metrics", HTTP_AUTHORIZATION="Bearer t0ken")
        assert response.status_code == 200
        return samples(response.content.decode())

    before = scrape_here()
    sku = make_sku(stock=1, per_user_limit=1)
    (_, first), (_, second) = make_buyers(2)
    assert post_order(api(first), sku.sku_id).status_code == 202
    assert post_order(api(second), sku.sku_id).status_code == 409
    after = scrape_here()
    assert purchases(after, "accepted") - purchases(before, "accepted") == 1
    assert purchases(after, "sold_out") - purchases(before, "sold_out") == 1
    assert after["seckill_purchase_seconds_count"] - before.get("seckill_purchase_seconds_count", 0) == 2


def test_recording_costs_a_few_microseconds():
    """The call `place` makes on every purchase (this process's mode; the
    multiprocess mode writes to a memory-mapped file, measured in the report)."""
    import time

    from core.metrics import purchase_observed

    n = 20_000
    started = time.perf_counter()
    for _ in range(n):
        purchase_observed(outcome="sold_out", started=started)
    per_call = (time.perf_counter() - started) / n
    assert per_call < 20e-6, per_call


@pytest.mark.parametrize("server", ["granian", "gunicorn"])
def test_a_killed_workers_counts_stay_in_the_sum_and_a_restart_starts_from_zero(
        server, process_env, make_sku, make_buyers):
    import os
    import signal

    from testsupport import wait_until
    from testsupport.processes import running, start_web, web_workers

    cookie = staff_session_cookie(make_buyers)
    sku = make_sku(stock=1, per_user_limit=1)
    buyers = [token for _, token in make_buyers(30)]
    web = start_web(process_env, name=f"web-metrics-{server}", server=server, workers=2)
    port = web.port
    try:
        wait_until(lambda: len(web_workers(web)) == 2, timeout=30, what="both workers forked")
        results = run_parallel(port, [(t, sku.sku_id, 1, uuid.uuid4().hex) for t in buyers], threads=8)
        assert len(results) == 30
        for pid in web_workers(web):  # every process that counted is gone
            os.kill(pid, signal.SIGKILL)
        wait_until(lambda: len(web_workers(web)) == 2 and _scrapes(port, cookie), timeout=30,
                   what="replacement workers answering")
        status, text = scrape(port, {"Cookie": cookie})
        assert status == 200, text[:300]
        assert samples(text)["seckill_purchase_seconds_count"] == 30  # the dead workers' counts, summed
        workers = web_workers(web)
    finally:
        web.stop(signal.SIGKILL)  # no exit hook runs: the files stay for the next start to clear
    # the killed workers are still exiting for a moment: the port is free once they are gone
    wait_until(lambda: not any(running(pid) for pid in workers), timeout=20, what="the killed workers gone")
    again = start_web(process_env, name=f"web-metrics-{server}-again", server=server, workers=2, port=port)
    try:
        # listening is not serving: granian binds before its workers load the
        # app, and a connection taken in between may be reset
        wait_until(lambda: len(web_workers(again)) == 2 and _scrapes(port, cookie), timeout=30,
                   what="the restarted workers answering")
        status, text = scrape(port, {"Cookie": cookie})
        assert status == 200, text[:300]
        assert samples(text).get("seckill_purchase_seconds_count", 0) == 0  # a new server, a clean slate
    finally:
        again.stop()


def _scrapes(port: int, cookie: str) -> bool:
    try:
        return scrape(port, {"Cookie": cookie})[0] == 200
    except OSError:
        return False
