"""The benchmark: real gunicorn + Celery worker + MariaDB/Redis/RabbitMQ on loopback.

    scripts/bench [--quick]

Phases, all at the same concurrency, in one run so the ratios compare like with like:
  1. baseline  POST /api/v1/baseline: authenticates and validates, takes nothing;
  2. gate sale POST /api/v1/orders on a large stock: figures while selling and
     after sell-out, MySQL statements per click (the web's own MySQL user, read
     from the server's USER_STATISTICS), and the lag until MySQL confirmed all;
  3. variant   the same sale without waiting for the publisher confirm on the
     purchase path, to measure what the confirm costs;
  4. 20x sale  demand 20x the stock, through the gate and through the naive
     MySQL-only path (row lock + checks + insert per click);
  5. verdict   every unit and order checked in both stores.
The last line is the key=value summary of API.md.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    HOST, accepted_ids, cpu_seconds, format_cpu, cpu_delta, make_buyers, order_requests, say, start_beat,
    start_web, start_worker, wait_consuming, web_statements,
)

DB_NAME = "seckill_bench"
# Throttling off: the load generator's buyers click far faster than 10/s each.
harness.configure(db_name=DB_NAME, redis_db=5, queue="seckill-bench", web_db_user="seckill_bench_web",
                  extra_env={"SECKILL_THROTTLE_RATE": "0"})

from benchmarks import loadgen  # noqa: E402


class ConfirmWatch(threading.Thread):
    """Notes when MySQL holds `units` locked units of the SKU (all confirmed)."""

    def __init__(self, sku_id: str, units: int):
        super().__init__(daemon=True)
        self.sku_id, self.units, self.done_at, self.stop_flag = sku_id, units, None, False

    def run(self) -> None:
        from django.db import connection

        from inventory.models import Sku

        while not self.stop_flag and self.done_at is None:
            if Sku.objects.get(pk=self.sku_id).locked_stock >= self.units:
                self.done_at = time.perf_counter()
            time.sleep(0.05)
        connection.close()


def sale(port: int, path: str, tokens: list[str], sku_id: str, stock: int, *, after_s: float,
         concurrency: int, total: int | None = None, used: dict[int, str] | None = None):
    """Drive a sale until `after_s` past sell-out (or `total` requests)."""
    watch = ConfirmWatch(sku_id, stock)
    watch.start()
    first_sold_out: list[float] = []

    def stop_when(r) -> bool:
        if r.status == 409 and b"sold_out" in r.body and not first_sold_out:
            first_sold_out.append(time.perf_counter())
        return bool(first_sold_out) and time.perf_counter() - first_sold_out[0] > after_s

    results = loadgen.run(host=HOST, port=port, concurrency=concurrency,
                          make_request=order_requests(path, tokens, sku_id, used),
                          total_requests=total, stop_when=None if total else stop_when, timeout_s=30)
    watch.join(timeout=60)
    watch.stop_flag = True
    return results, watch.done_at


def order_life(port: int, results, used: dict[int, str], *, concurrency: int) -> dict:
    """Pay most accepted orders, cancel some and let the rest expire; then the balance."""
    from datetime import timedelta

    from django.utils import timezone

    from orders.models import Order
    from orders.services import life as order_services

    owned = [(json.loads(r.body)["order_id"], used[r.index]) for r in results if r.status == 202]
    random.Random(11).shuffle(owned)
    n = len(owned)
    pay, cancel, expire = owned[: n * 8 // 10], owned[n * 8 // 10: n * 9 // 10], owned[n * 9 // 10:]
    jobs = [("pay", o, t) for o, t in pay] + [("cancel", o, t) for o, t in cancel]

    def make(i: int):
        kind, order_id, token = jobs[i]
        return ("POST", f"/api/v1/orders/{order_id}/{kind}", {"Authorization": f"Token {token}"}, b"")

    t0 = time.perf_counter()
    res = loadgen.run(host=HOST, port=port, concurrency=concurrency, make_request=make, total_requests=len(jobs))
    say("    " + loadgen.format_summary("pay + cancel", loadgen.summarize(res)))
    Order.objects.filter(pk__in=[o for o, _ in expire]).update(expires_at=timezone.now() - timedelta(seconds=1))
    expired = 0
    while True:  # what the beat sweep does every few seconds
        n_exp = order_services.orders_expire(limit=200)
        expired += n_exp
        if not n_exp:
            break
    bad = sum(1 for r in res if r.status != 200)
    return {"paid": len(pay), "cancelled": len(cancel), "expired": expired, "refused": bad,
            "seconds": time.perf_counter() - t0}


def drain_wait(sku_id: str, n: int, timeout: float) -> bool:
    """Until MySQL holds `n` confirmed orders of the SKU."""
    from inventory.models import Sku

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if Sku.objects.get(pk=sku_id).locked_stock >= n:
            return True
        time.sleep(0.02)
    return False


def wait_gives(sku_ids: list[str], timeout: float = 60) -> bool:
    from inventory.models import InventoryLog, OutboxMessage

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not InventoryLog.objects.filter(sku_id__in=sku_ids, operation="INCR", status="pending").exists() \
                and not OutboxMessage.objects.filter(sku_id__in=sku_ids, sent_at__isnull=True).exists():
            return True
        time.sleep(0.1)
    return False


def split(results):
    ok = [r.finished for r in results if r.status == 202]
    last_ok = max(ok) if ok else min(r.started for r in results)
    start = min(r.started for r in results)
    end = max(r.finished for r in results)
    selling = loadgen.summarize([r for r in results if r.finished <= last_ok], start, last_ok)
    after = loadgen.summarize([r for r in results if r.started > last_ok + 0.3], last_ok + 0.3, end)
    return selling, after, last_ok


# --- verdict ------------------------------------------------------------------------------

def check_sku(sku_id: str, stock: int, accepted: set[str], *, gate: bool, life: dict | None = None) -> dict:
    """Every unit and order of the SKU in both stores. With `life`, after pay /
    cancel / expiry: sold = paid, available = given back, Redis = MySQL."""
    from inventory import redis_store
    from inventory.models import InventoryLog, Sku
    from orders.models import Order

    sku = Sku.objects.get(pk=sku_id)
    live = redis_store.live_stock(sku_id=sku_id) if gate else None
    orders = Order.objects.filter(sku_id=sku_id).exclude(status=Order.Status.FAILED)
    mysql_ids = set(orders.values_list("order_id", flat=True))
    by_status = {s: orders.filter(status=s).count() for s in ("PENDING_PAYMENT", "PAID", "CANCELLED", "EXPIRED")}
    held = sum(orders.filter(status__in=["PENDING_PAYMENT", "PAID"]).values_list("quantity", flat=True))
    decr = InventoryLog.objects.filter(sku_id=sku_id, operation="DECR").count()
    balanced = sku.total_stock == sku.available_stock + sku.frozen_stock + sku.locked_stock + sku.sold_stock
    returned = by_status["CANCELLED"] + by_status["EXPIRED"]
    ok = (balanced and len(mysql_ids) == stock and accepted == mysql_ids and decr == len(mysql_ids)
          and sku.available_stock == returned and sku.locked_stock == by_status["PENDING_PAYMENT"]
          and sku.sold_stock == by_status["PAID"]
          and (live is None or (live.available == sku.available_stock and live.inflight == 0)))
    if life is not None:
        ok = ok and by_status["PAID"] == life["paid"] and returned == life["cancelled"] + life["expired"]
    return {
        "sku": sku_id, "stock": stock, "total": sku.total_stock, "available": sku.available_stock,
        "locked": sku.locked_stock, "sold": sku.sold_stock, "redis_available": live.available if live else None,
        "in_flight": live.inflight if live else 0, "orders": len(mysql_ids),
        **{k.lower(): v for k, v in by_status.items()}, "log_rows": decr, "balanced": balanced,
        "oversold": max(0, held + returned - stock), "lost": len(accepted - mysql_ids),
        "phantom": len(mysql_ids - accepted), "ok": ok,
    }


# --- main ----------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller stocks and shorter phases")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--web-workers", type=int, default=int(os.environ.get("WEB_CONCURRENCY", "2")))
    ap.add_argument("--buyers", type=int, default=2000)
    ap.add_argument("--skip-variant", action="store_true", help="skip the publisher-confirm variant")
    ap.add_argument("--backlog", type=int, default=None, help="units sold while the worker is down (phase 5)")
    args = ap.parse_args()
    phase_s = 3.0 if args.quick else 8.0
    sell_stock = 1500 if args.quick else 6000
    whole_stock = 200 if args.quick else 500
    backlog_stock = args.backlog or (3000 if args.quick else 20000)

    say("setting up a fresh benchmark database, Redis db 5 and queue seckill-bench ...")
    harness.fresh_stores()
    new_sku = harness.new_sku

    tokens = make_buyers(args.buyers)
    port = 18000 + random.randint(0, 999)
    worker = start_worker()
    beat = start_beat()
    web = start_web(port, args.web_workers)
    c = args.concurrency
    summary: dict[str, object] = {}
    checks: list[dict] = []
    try:

        # warm-up: load every token record and the code paths
        warm = new_sku(10 ** 6)
        loadgen.run(host=HOST, port=port, concurrency=c, duration_s=2,
                    make_request=order_requests("/api/v1/baseline", tokens, warm))

        say(f"\n[1] baseline: POST /api/v1/baseline, {c} connections, {phase_s:.0f} s")
        cpu0 = cpu_seconds()
        base = loadgen.summarize(loadgen.run(host=HOST, port=port, concurrency=c, duration_s=phase_s,
                                             make_request=order_requests("/api/v1/baseline", tokens, warm)))
        say("    " + loadgen.format_summary("baseline", base))
        say(f"    CPU used during the phase: {format_cpu(cpu_delta(cpu0))}")

        say(f"\n[2] gate sale: stock {sell_stock}, then {phase_s:.0f} s after sell-out")
        sku = new_sku(sell_stock)
        before = web_statements()
        cpu0 = cpu_seconds()
        used: dict[int, str] = {}
        results, confirmed_at = sale(port, "/api/v1/orders", tokens, sku, sell_stock, after_s=phase_s,
                                     concurrency=c, used=used)
        statements = web_statements() - before
        selling, after, last_ok = split(results)
        accepted = accepted_ids(results)
        say("    " + loadgen.format_summary("selling   ", selling))
        say("    " + loadgen.format_summary("sold out  ", after))
        lag = (confirmed_at - last_ok) if confirmed_at else float("nan")
        say(f"    accepted {len(accepted)}; all confirmed in MySQL {lag:.2f} s after the last acceptance")
        say(f"    MySQL statements by the web processes: {statements} for {len(results)} requests")
        say(f"    CPU used during the phase: {format_cpu(cpu_delta(cpu0))}")
        say("\n[2b] after the sale: pay 80 %, cancel 10 %, let 10 % expire")
        life = order_life(port, results, used, concurrency=c)
        gives_done = wait_gives([sku])
        say(f"    paid {life['paid']}, cancelled {life['cancelled']}, expired {life['expired']}, "
            f"refused {life['refused']}; all gives applied in Redis: {gives_done}")
        checks.append(check_sku(sku, sell_stock, accepted, gate=True, life=life))
        summary.update(
            soldout_ratio=after["rps"] / base["rps"], selling_ratio=selling["rps"] / base["rps"],
            soldout_p99_ratio=after["p99_ms"] / base["p99_ms"] if base["p99_ms"] else 0,
            mysql_per_click=statements / len(results), confirm_lag_s=lag,
        )

        if not args.skip_variant:
            say("\n[3] variant: the same sale without waiting for the publisher confirm")
            web.stop()
            web = start_web(port, args.web_workers, {"SECKILL_WEB_PUBLISH_CONFIRM": "0"})
            loadgen.run(host=HOST, port=port, concurrency=c, duration_s=1,
                        make_request=order_requests("/api/v1/baseline", tokens, warm))
            vstock = sell_stock * 2 // 3
            vsku = new_sku(vstock)
            vresults, _ = sale(port, "/api/v1/orders", tokens, vsku, vstock, after_s=1.0, concurrency=c)
            vselling, _, _ = split(vresults)
            say("    " + loadgen.format_summary("selling (no publisher confirm)", vselling))
            summary["selling_ratio_no_confirm"] = vselling["rps"] / base["rps"]
            checks.append(check_sku(vsku, vstock, accepted_ids(vresults), gate=True))
            web.stop()
            web = start_web(port, args.web_workers)
            loadgen.run(host=HOST, port=port, concurrency=c, duration_s=1,
                        make_request=order_requests("/api/v1/baseline", tokens, warm))

        demand = whole_stock * 20
        say(f"\n[4] whole sale, demand {demand} on stock {whole_stock} (20x)")
        gsku = new_sku(whole_stock)
        t0 = time.perf_counter()
        gres, gconf = sale(port, "/api/v1/orders", tokens, gsku, whole_stock, after_s=0, concurrency=c, total=demand)
        gate_s = max(max(r.finished for r in gres), gconf or float("inf")) - t0
        say("    " + loadgen.format_summary("gate      ", loadgen.summarize(gres)))
        nsku = new_sku(whole_stock)
        t0 = time.perf_counter()
        nres = loadgen.run(host=HOST, port=port, concurrency=c, total_requests=demand, timeout_s=60,
                           make_request=order_requests("/api/v1/bench/mysql-orders", tokens, nsku))
        naive_s = max(r.finished for r in nres) - t0
        nselling, _, _ = split(nres)
        say("    " + loadgen.format_summary("mysql-only", loadgen.summarize(nres)))
        say("    " + loadgen.format_summary("mysql-only while selling", nselling))
        say(f"    whole sale: gate {gate_s:.2f} s (until all confirmed), mysql-only {naive_s:.2f} s")
        summary["gate_vs_mysql"] = naive_s / gate_s
        summary["selling_vs_mysql"] = selling["rps"] / nselling["rps"] if nselling["rps"] else 0
        checks.append(check_sku(gsku, whole_stock, accepted_ids(gres), gate=True))
        checks.append(check_sku(nsku, whole_stock, accepted_ids(nres), gate=False))

        say(f"\n[5] backlog: worker stopped during a sale of {backlog_stock} units (beat sweeping), then started")
        bsku = new_sku(backlog_stock, limit=10 ** 6)
        worker.stop()
        bres = loadgen.run(host=HOST, port=port, concurrency=c, timeout_s=30,
                           make_request=order_requests("/api/v1/orders", tokens, bsku),
                           stop_when=lambda r: r.status == 409 and b"sold_out" in r.body)
        baccepted = accepted_ids(bres)
        say("    " + loadgen.format_summary("selling, no worker", loadgen.summarize(bres)))
        worker = start_worker(wait=False)
        wait_consuming()
        t0 = time.perf_counter()
        cpu0 = cpu_seconds()
        drained = drain_wait(bsku, len(baccepted), timeout=300)
        drain_s = time.perf_counter() - t0
        summary["drain_rate"] = len(baccepted) / drain_s if drained else 0.0
        say(f"    {len(baccepted)} accepted while the worker was down; all confirmed {drain_s:.2f} s after "
            f"its consumer came up: {summary['drain_rate']:.0f} orders/s")
        say(f"    CPU used while draining: {format_cpu(cpu_delta(cpu0))}")
        checks.append(check_sku(bsku, backlog_stock, baccepted, gate=True))
    finally:
        web.stop()
        worker.stop()
        beat.stop()

    say("\n[6] consistency: final balance per SKU")
    for ch in checks:
        say("    " + " ".join(f"{k}={v}" for k, v in ch.items()))
    oversold = sum(ch["oversold"] for ch in checks)
    lost = sum(ch["lost"] for ch in checks)
    ok = all(ch["ok"] for ch in checks)
    targets = {
        "soldout_ratio>=0.85": summary["soldout_ratio"] >= 0.85,
        "soldout_p99<=1.5x": summary["soldout_p99_ratio"] <= 1.5,
        "selling_ratio>=0.6": summary["selling_ratio"] >= 0.6,
        "gate_vs_mysql>=2": summary["gate_vs_mysql"] >= 2,
        "mysql_per_click==0": summary["mysql_per_click"] == 0,
        "drain_rate>=5000": summary.get("drain_rate", 0) >= 5000,
    }
    say("    targets: " + ", ".join(f"{k} {'met' if v else 'MISSED'}" for k, v in targets.items()))
    extra = ""
    if "selling_ratio_no_confirm" in summary:
        extra = f" selling_ratio_no_confirm={summary['selling_ratio_no_confirm']:.2f}"
    say(f"\nbaseline_rps={base['rps']:.0f} soldout_p99_ratio={summary['soldout_p99_ratio']:.2f}{extra}")
    say(
        f"soldout_ratio={summary['soldout_ratio']:.2f} selling_ratio={summary['selling_ratio']:.2f} "
        f"gate_vs_mysql={summary['gate_vs_mysql']:.2f} mysql_per_click={summary['mysql_per_click']:.3f} "
        f"confirm_lag_s={summary['confirm_lag_s']:.2f} drain_rate={summary.get('drain_rate', 0):.0f} "
        f"oversold={oversold} lost={lost} "
        f"verdict={'ok' if ok and oversold == 0 and lost == 0 else 'FAIL'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
