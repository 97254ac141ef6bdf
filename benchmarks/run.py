"""The benchmark: real gunicorn + Celery worker + MariaDB/Redis/RabbitMQ on loopback.

    bash scripts/bench [--quick] [--rounds N] [--phase-seconds S] [--server gunicorn|granian]

--server granian runs the web tier (and the floor) under granian's WSGI
interface instead of gunicorn, with the same worker and thread counts, to
compare the two by measurement; gunicorn stays the default.

The machine is shared and noisy, so every ratio is taken inside one round of
interleaved phases (baseline, floor, selling, sold out, pay) and the rounds'
ratios are reported as a median with their spread. Phases, each at the same
concurrency:

  baseline  POST /api/v1/baseline: authenticates, throttles and validates like
            POST orders, takes nothing
  floor     a bare Django view (no DRF, no middleware, no authentication) on a
            second server (the same program and settings): the framework's floor
  selling   POST /api/v1/orders on a stock larger than the phase can sell
  sold out  POST /api/v1/orders on a sold-out SKU
  pay       pay (80 %) and cancel (20 %) of the orders the round's sale made

The warm-up drives baseline, floor and sold out briefly with every load
generator: wrk (benchmarks/wrk.py, when installed) and the asyncio client
(benchmarks/loadgen.py) in one process or one per core, and prints what each
reaches. Every ratio compares two phases, so they must share one generator; selling and
pay need every response's body (the orders sold, their owners), which only the
asyncio client keeps, so every phase runs on the asyncio client's better
process count (measured on sold out). When wrk reaches clearly more on a
phase, the line says so: the asyncio client, not the server, may be that
phase's limit (moving selling and pay to wrk needs their 202 bodies from its
Lua). Each phase line names its generator and the generator's CPU share of the
machine, flagged when it is the limit. The CPU per request is counted
by pid: the servers this run started and their descendants, whatever program
they run; the generator (this process, wrk, the forked clients) on its own.

then, once: the whole sale (demand 20x the stock) through the gate and through
the naive MySQL-only path; the backlog (the worker stopped during a 20 000-unit
sale with beat sweeping, then started: drain_rate); every unit and order of
every SKU checked in both stores. The last line is the key=value summary of
API.md.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness  # noqa: E402
from benchmarks.harness import HOST, accepted_ids, cpu_delta, cpu_seconds, order_requests, progress, say  # noqa: E402

DB_NAME = "seckill_bench"
# Throttling off: the load generator's buyers click far faster than 10/s each.
harness.configure(db_name=DB_NAME, redis_db=5, queue="seckill-bench", web_db_user="seckill_bench_web",
                  extra_env={"SECKILL_THROTTLE_RATE": "0"})

from benchmarks import loadgen, wrk  # noqa: E402

CPU_KEYS = ("web", "worker", "mariadb", "redis", "rabbitmq")
CORES = os.cpu_count() or 1
# Above this share of the machine the load generator, not the server, sets the pace.
LOADGEN_LIMIT = 0.4


# --- phases ---------------------------------------------------------------------------

class Phase:
    def __init__(self, name: str, s: dict, cpu: dict[str, float], seconds: float, generator: str, results=None):
        self.name, self.results, self.generator = name, results, generator
        self.rps, self.p50, self.p99 = s["rps"], s["p50_ms"], s["p99_ms"]
        self.statuses, self.requests = s["by_status"], s["requests"]
        n = max(1, self.requests)
        self.cpu_ms = {k: 1000 * cpu[k] / n for k in CPU_KEYS}
        # the generator's CPU seconds over the machine's (phase seconds x cores)
        self.loadgen_share = cpu["loadgen"] / max(1e-9, seconds * CORES)

    def line(self) -> str:
        cpu = ", ".join(f"{k} {v:.2f}" for k, v in self.cpu_ms.items())
        limit = "  !! load generator is the limit" if self.loadgen_share > LOADGEN_LIMIT else ""
        return (f"{self.name:<10} {self.rps:7.0f} req/s  p50 {self.p50:6.1f} ms  p99 {self.p99:6.1f} ms  "
                f"CPU ms/req: {cpu}  {dict(self.statuses)}  [{self.generator}, loadgen CPU "
                f"{self.loadgen_share:.0%} of the machine]{limit}")


class Load:
    """One phase's requests, for either generator: `make` for the asyncio
    client, `wrk_args` (path, tokens, body, key prefix) for wrk, or None when
    the phase needs every response's body or a fixed list of requests."""

    def __init__(self, make, wrk_args: dict | None = None, shared: dict | None = None):
        self.make, self.wrk_args, self.shared = make, wrk_args, shared


def order_load(path: str, tokens: list[str], sku_id: str, *, key_prefix: str, used: dict | None = None,
               seed: int = 7) -> Load:
    body = json.dumps({"sku_id": sku_id, "quantity": 1}).encode()
    return Load(order_requests(path, tokens, sku_id, used, seed=seed, key_prefix=key_prefix),
                None if used is not None else
                {"path": path, "tokens": tokens, "body": body, "key_prefix": key_prefix}, shared=used)


def drive(gen: str, port: int, load: Load, *, concurrency: int, seconds: float,
          total: int | None = None) -> tuple[dict, list | None]:
    """Run the load with the generator `gen` ("wrk" or "asyncio xN"); the
    figures, and the results when the asyncio client ran."""
    if gen == "wrk" and load.wrk_args and total is None:
        try:
            return wrk.run(host=HOST, port=port, concurrency=concurrency, seconds=seconds,
                           **load.wrk_args), None
        except (OSError, RuntimeError) as exc:
            say(f"    wrk failed ({exc}); the asyncio client drives from now on")
            WRK_FAILED.append(exc)
    procs = int(gen.split("x")[1]) if gen.startswith("asyncio x") else ASYNC_PROCS[0]
    results = loadgen.run_procs(processes=procs, host=HOST, port=port, concurrency=concurrency,
                                make_request=load.make, duration_s=None if total else seconds,
                                total_requests=total, timeout_s=30, shared=load.shared)
    return loadgen.summarize(results), results


# The generator each phase uses, chosen by measurement (choose_generators);
# a phase not in it (or every phase, after wrk failed) uses the asyncio client
# in ASYNC_PROCS processes.
GENERATORS: dict[str, str] = {}
ASYNC_PROCS = [1]
WRK_FAILED: list[Exception] = []


def run_phase(name: str, port: int, load: Load, *, concurrency: int, seconds: float,
              total: int | None = None) -> Phase:
    gen = GENERATORS.get(name) if load.wrk_args and total is None else None
    if not gen or (gen == "wrk" and WRK_FAILED):
        gen = f"asyncio x{ASYNC_PROCS[0]}"
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    s, results = drive(gen, port, load, concurrency=concurrency, seconds=seconds, total=total)
    if results is not None and gen == "wrk":  # wrk failed just now
        gen = f"asyncio x{ASYNC_PROCS[0]}"
    return Phase(name, s, cpu_delta(cpu0), time.perf_counter() - t0, gen, results)


def choose_generators(loads: dict[str, tuple[int, Load]], concurrency: int, seconds: float = 2) -> None:
    """Drive each phase briefly with every generator and keep the one that
    reaches the higher rate (a generator that is the limit reaches less): wrk,
    the asyncio client in one process, in one per core. The phases that need
    the asyncio client get its better process count, measured on sold out."""
    options = ["asyncio x1"] + ([f"asyncio x{CORES}"] if CORES > 1 else []) + (["wrk"] if wrk.available() else [])
    for name, (port, load) in loads.items():
        rates = {}
        for gen in options:
            if gen == "wrk" and WRK_FAILED:
                continue
            s, _ = drive(gen, port, load, concurrency=concurrency, seconds=seconds)
            rates[gen] = s["rps"]
            if gen == "wrk" and WRK_FAILED:
                del rates[gen]  # it fell back: that figure was the asyncio client's
        best = max(rates, key=rates.get)
        say(f"    generator for {name:<9}: " + ", ".join(f"{g} {r:.0f} req/s" for g, r in rates.items())
            + f" (highest: {best})")
        asyncs = {g: r for g, r in rates.items() if g.startswith("asyncio")}
        if "wrk" in rates and rates["wrk"] > 1.15 * max(asyncs.values()):
            say(f"    !! wrk reaches {rates['wrk'] / max(asyncs.values()):.2f}x the asyncio client on {name}: "
                "the client may be that phase's limit")
        if name == "sold out":
            ASYNC_PROCS[0] = int(max(asyncs, key=asyncs.get).split("x")[1])
    # The ratios compare phases: one generator drives them all (selling and pay need the bodies).
    GENERATORS.clear()
    say(f"    every phase: asyncio x{ASYNC_PROCS[0]} (ratios compare phases driven alike)")


def floor_requests(tokens: list[str], key_prefix: str = "floor") -> Load:
    body = json.dumps({"sku_id": "FLOOR", "quantity": 1}).encode()
    rnd = random.Random(3)

    def make(i: int):
        return ("POST", "/floor", {"Authorization": f"Token {rnd.choice(tokens)}",
                                   "Content-Type": "application/json", "Idempotency-Key": f"{key_prefix}-{i}"}, body)

    return Load(make, {"path": "/floor", "tokens": tokens, "body": body, "key_prefix": key_prefix})


def pay_requests(owned: list[tuple[str, str]], seed: int):
    """Pay 80 %, cancel 20 % of the orders (order id, owner's token)."""
    rnd = random.Random(seed)
    jobs = [("pay" if rnd.random() < 0.8 else "cancel", oid, tok) for oid, tok in owned]

    def make(i: int):
        kind, order_id, token = jobs[i]
        return ("POST", f"/api/v1/orders/{order_id}/{kind}", {"Authorization": f"Token {token}"}, b"")

    return make, jobs


def wait_locked(sku_id: str, units: int, timeout: float = 120) -> float | None:
    """Until MySQL has taken `units` units of the SKU out of `available` (every
    acceptance confirmed); returns when (perf_counter), or None on timeout."""
    from inventory.models import Sku

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s = Sku.objects.get(pk=sku_id)
        if s.total_stock - s.available_stock - s.frozen_stock >= units:
            return time.perf_counter()
        time.sleep(0.02)
    return None


def owned_orders(results, used: dict[int, str]) -> list[tuple[str, str]]:
    return [(json.loads(r.body)["order_id"], used[r.index]) for r in results if r.status == 202]


def median_spread(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


# --- the order life after the rounds, and the verdict --------------------------------------

def settle_life(sku_ids: list[str], timeout: float = 120) -> bool:
    """Expire what is still unpaid (as the sweep does), then wait until every
    bucket move and every give has reached both stores."""
    from datetime import timedelta

    from django.utils import timezone

    from orders.models import Order
    from orders.services import life

    Order.objects.filter(sku_id__in=sku_ids, status="PENDING_PAYMENT").update(
        expires_at=timezone.now() - timedelta(seconds=1))
    while life.orders_expire(limit=500, sku_ids=sku_ids):
        pass
    return wait_quiet(sku_ids, timeout)


def wait_quiet(sku_ids: list[str], timeout: float) -> bool:
    from inventory.redis import gate
    from inventory.models import InventoryLog, OutboxMessage
    from orders.selectors import moves_pending

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (not moves_pending(sku_ids=sku_ids)
                and not InventoryLog.objects.filter(sku_id__in=sku_ids, status="pending")
                .exclude(operation="DECR").exists()
                and not OutboxMessage.objects.filter(sku_id__in=sku_ids, sent_at__isnull=True).exists()
                and not any(gate.inflight_entries(sku_id=s) for s in sku_ids)):
            return True
        time.sleep(0.1)
    return False


def check_sku(sku_id: str, stock: int, accepted: set[str], *, gate: bool) -> dict:
    """Every unit and order of the SKU in both stores: the buckets add up and
    match the orders, Redis equals MySQL, no accepted order lost, none extra."""
    from inventory.redis import live as redis_live
    from inventory.models import InventoryLog, Sku
    from orders.models import Order

    sku = Sku.objects.get(pk=sku_id)
    live = redis_live.live_stock(sku_id=sku_id) if gate else None
    orders = Order.objects.filter(sku_id=sku_id).exclude(status=Order.Status.FAILED)
    ids = set(orders.values_list("order_id", flat=True))
    by = {s: orders.filter(status=s).count() for s in ("PENDING_PAYMENT", "PAID", "CANCELLED", "EXPIRED")}
    decr = InventoryLog.objects.filter(sku_id=sku_id, operation="DECR").exclude(order_id__isnull=True)
    balanced = sku.total_stock == sku.available_stock + sku.frozen_stock + sku.locked_stock + sku.sold_stock
    given_back = by["CANCELLED"] + by["EXPIRED"]
    sold = len(ids)
    ok = (balanced and accepted == ids and decr.count() == len(ids) and sku.locked_stock == by["PENDING_PAYMENT"]
          and sku.sold_stock == by["PAID"] and sku.available_stock == stock - sold + given_back
          and (live is None or (live.available == sku.available_stock and live.inflight == 0)))
    return {
        "sku": sku_id, "stock": stock, "available": sku.available_stock, "locked": sku.locked_stock,
        "sold": sku.sold_stock, "redis_available": live.available if live else None, "orders": len(ids),
        **{k.lower(): v for k, v in by.items()}, "balanced": balanced,
        "oversold": max(0, by["PENDING_PAYMENT"] + by["PAID"] - stock), "lost": len(accepted - ids),
        "phantom": len(ids - accepted), "ok": ok,
    }


# --- main ------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="two short rounds, smaller sales")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--phase-seconds", type=float, default=None)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--web-workers", type=int, default=int(os.environ.get("WEB_CONCURRENCY", "2")))
    ap.add_argument("--server", choices=harness.WEB_SERVERS, default="gunicorn",
                    help="the HTTP server of the web tier and the floor (default gunicorn, as deployed)")
    ap.add_argument("--buyers", type=int, default=2000)
    ap.add_argument("--backlog", type=int, default=None, help="units sold while the worker is down")
    ap.add_argument("--skip", default="", help="comma-separated: whole, backlog")
    args = ap.parse_args()
    rounds = args.rounds or (2 if args.quick else 4)
    secs = args.phase_seconds or (3.0 if args.quick else 6.0)
    whole_stock = 200 if args.quick else 500
    backlog_stock = args.backlog or (3000 if args.quick else 20000)
    skip = set(filter(None, args.skip.split(",")))
    c = args.concurrency

    say(f"setting up a fresh database {DB_NAME}, Redis db 5 and queue seckill-bench ...")
    harness.fresh_stores()
    tokens = harness.make_buyers(args.buyers)
    port, floor_port = 18000 + random.randint(0, 499), 18500 + random.randint(0, 499)
    worker = harness.start_worker()
    beat = harness.start_beat()
    web = harness.start_web(port, args.web_workers, server=args.server)
    server_name = Path(web.args[0]).name  # the program the web tier runs, whatever it is
    # The floor runs under the same server as the site: floor_ratio compares like with like.
    floor = harness.web_server(args.server, "benchmarks.floor:application", floor_port, args.web_workers,
                               dict(os.environ), "bench-floor.log")
    summary: dict[str, float] = {}
    checks: list[dict] = []
    sale_skus: list[tuple[str, int, set[str]]] = []
    rows: dict[str, list[Phase]] = {k: [] for k in ("baseline", "floor", "selling", "sold out", "pay")}
    lags: list[float] = []
    statements = clicks = 0
    try:
        warm = harness.new_sku(10 ** 6)
        out = harness.new_sku(1, limit=10)
        loadgen.run(host=HOST, port=port, concurrency=c, total_requests=20,
                    make_request=order_requests("/api/v1/orders", tokens, out, key_prefix="sell-out"))
        # the warm-up (token records, code paths) measures the generators, too
        say("\n[0] the load generator per phase, by measurement")
        choose_generators({
            "baseline": (port, order_load("/api/v1/baseline", tokens, warm, key_prefix="warm-b")),
            "floor": (floor_port, floor_requests(tokens, key_prefix="warm-f")),
            "sold out": (port, order_load("/api/v1/orders", tokens, out, key_prefix="warm-o")),
        }, c)

        say(f"\n[1] {rounds} interleaved rounds of {secs:.0f} s phases, {c} connections, "
            f"{args.web_workers} web processes")
        for r in range(rounds):
            progress(f"round {r + 1}/{rounds}")
            rows["baseline"].append(run_phase("baseline", port, order_load(
                "/api/v1/baseline", tokens, warm, key_prefix=f"b{r}"), concurrency=c, seconds=secs))
            rows["floor"].append(run_phase("floor", floor_port, floor_requests(tokens, key_prefix=f"f{r}"),
                                           concurrency=c, seconds=secs))
            stock = 10 ** 5
            sku = harness.new_sku(stock, limit=10 ** 6)
            used: dict[int, str] = {}
            before = harness.web_statements()
            sell = run_phase("selling", port, order_load("/api/v1/orders", tokens, sku, used=used, seed=r,
                                                         key_prefix=f"s{r}"), concurrency=c, seconds=secs)
            rows["selling"].append(sell)
            last_ok = max((x.finished for x in sell.results if x.status == 202), default=time.perf_counter())
            accepted = accepted_ids(sell.results)
            done = wait_locked(sku, len(accepted))
            lags.append((done - last_ok) if done else float("nan"))
            soldout = run_phase("sold out", port, order_load("/api/v1/orders", tokens, out, key_prefix=f"o{r}"),
                                concurrency=c, seconds=secs)
            rows["sold out"].append(soldout)
            statements += harness.web_statements() - before
            clicks += sell.requests + soldout.requests
            make, jobs = pay_requests(owned_orders(sell.results, used), seed=r)
            rows["pay"].append(run_phase("pay", port, Load(make), concurrency=c, seconds=secs, total=len(jobs)))
            sale_skus.append((sku, stock, accepted))
            for name in ("baseline", "floor", "selling", "sold out", "pay"):
                say(f"    r{r + 1} " + rows[name][-1].line())

        def ratios(a: str, b: str, field: str = "rps") -> list[float]:
            return [getattr(x, field) / getattr(y, field) for x, y in zip(rows[a], rows[b]) if getattr(y, field)]

        spread = {
            "selling_ratio": ratios("selling", "baseline"),
            "soldout_ratio": ratios("sold out", "baseline"),
            "floor_ratio": ratios("sold out", "floor"),
            "pay_ratio": ratios("pay", "baseline"),
            "pay_p99_ratio": ratios("pay", "baseline", "p99"),
            "soldout_p99_ratio": ratios("sold out", "baseline", "p99"),
        }
        say("\n    ratio                median   (min - max over the rounds)")
        for k, v in spread.items():
            m, lo, hi = median_spread(v)
            summary[k] = m
            say(f"    {k:<20} {m:6.2f}   ({lo:.2f} - {hi:.2f})")
        for name in rows:
            cpu = {k: statistics.median(p.cpu_ms[k] for p in rows[name]) for k in CPU_KEYS}
            share = max(p.loadgen_share for p in rows[name])
            gens = "/".join(sorted({p.generator for p in rows[name]}))
            say(f"    CPU ms/request, {name:<9}: " + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items())
                + f"  | loadgen ({gens}) up to {share:.0%} of the machine"
                + ("  !! load generator is the limit" if share > LOADGEN_LIMIT else ""))
        summary["loadgen_cpu_share"] = max(p.loadgen_share for ps in rows.values() for p in ps)
        say(f"    (loadgen CPU share: the generator's CPU seconds / (phase seconds x {CORES} cores); "
            f"above {LOADGEN_LIMIT:.0%} it is the limit)")
        summary["floor_rps"] = statistics.median(p.rps for p in rows["floor"])
        summary["baseline_rps"] = statistics.median(p.rps for p in rows["baseline"])
        summary["confirm_lag_s"] = max(lags)
        summary["mysql_per_click"] = statements / max(1, clicks)
        say(f"    confirm lag (last acceptance -> all confirmed): {', '.join(f'{x:.2f}' for x in lags)} s")
        say(f"    MySQL statements by the web processes: {statements} for {clicks} purchase requests")

        if "whole" not in skip:
            demand = whole_stock * 20
            say(f"\n[2] whole sale, demand {demand} on stock {whole_stock} (20x)")
            gsku = harness.new_sku(whole_stock)
            t0 = time.perf_counter()
            gres = loadgen.run(host=HOST, port=port, concurrency=c, total_requests=demand, timeout_s=30,
                               make_request=order_requests("/api/v1/orders", tokens, gsku))
            gaccepted = accepted_ids(gres)
            gdone = wait_locked(gsku, len(gaccepted))
            gate_s = max(max(x.finished for x in gres), gdone or float("inf")) - t0
            nsku = harness.new_sku(whole_stock)
            t0 = time.perf_counter()
            nres = loadgen.run(host=HOST, port=port, concurrency=c, total_requests=demand, timeout_s=60,
                               make_request=order_requests("/api/v1/bench/mysql-orders", tokens, nsku))
            naive_s = max(x.finished for x in nres) - t0
            say(f"    gate {gate_s:.2f} s (until all confirmed), mysql-only {naive_s:.2f} s")
            summary["gate_vs_mysql"] = naive_s / gate_s
            sale_skus.append((gsku, whole_stock, gaccepted))
            checks.append(check_sku(nsku, whole_stock, accepted_ids(nres), gate=False))

        if "backlog" not in skip:
            say(f"\n[3] backlog: the worker stopped during a sale of {backlog_stock} units (beat sweeping), "
                f"then started")
            bsku = harness.new_sku(backlog_stock, limit=10 ** 6)
            worker.stop()
            bres = loadgen.run(host=HOST, port=port, concurrency=c, timeout_s=30,
                               make_request=order_requests("/api/v1/orders", tokens, bsku, key_prefix="backlog"),
                               stop_when=lambda x: x.status == 409 and b"sold_out" in x.body)
            baccepted = accepted_ids(bres)
            progress(f"{len(baccepted)} accepted with the worker down; starting it")
            worker = harness.start_worker(wait=False)
            harness.wait_consuming()
            t0 = time.perf_counter()
            cpu0 = cpu_seconds()
            done = wait_locked(bsku, len(baccepted), timeout=300)
            drain_s = time.perf_counter() - t0
            summary["drain_rate"] = len(baccepted) / drain_s if done else 0.0
            cpu = cpu_delta(cpu0)
            say(f"    {len(baccepted)} accepted while the worker was down; all confirmed {drain_s:.2f} s after its "
                f"consumer came up: {summary['drain_rate']:.0f} orders/s")
            say("    CPU ms per drained order: " + ", ".join(
                f"{k} {1000 * cpu[k] / max(1, len(baccepted)):.3f}" for k in CPU_KEYS))
            sale_skus.append((bsku, backlog_stock, baccepted))

        say("\n[4] consistency: the order life settled, every SKU in both stores")
        quiet = settle_life([s for s, _, _ in sale_skus])
        say(f"    every move, give and confirm reached both stores: {quiet}")
        for sku_id, stock, accepted in sale_skus:
            checks.append(check_sku(sku_id, stock, accepted, gate=True))
    finally:
        for server in (web, floor, worker, beat):
            server.stop()

    for ch in checks:
        say("    " + " ".join(f"{k}={v}" for k, v in ch.items()))
    oversold = sum(ch["oversold"] for ch in checks)
    lost = sum(ch["lost"] for ch in checks)
    ok = all(ch["ok"] for ch in checks) and oversold == 0 and lost == 0
    targets = {
        "soldout_ratio>=0.85": summary["soldout_ratio"] >= 0.85,
        "selling_ratio>=0.6": summary["selling_ratio"] >= 0.6,
        "pay_ratio>=0.5": summary["pay_ratio"] >= 0.5,
        "pay_p99_ratio<=2": summary["pay_p99_ratio"] <= 2,
        "floor_ratio>=0.5": summary["floor_ratio"] >= 0.5,
        "gate_vs_mysql>=2": summary.get("gate_vs_mysql", 0) >= 2,
        "mysql_per_click==0": summary["mysql_per_click"] == 0,
        "drain_rate>=5000": summary.get("drain_rate", 0) >= 5000,
    }
    say("    targets: " + ", ".join(f"{k} {'met' if v else 'MISSED'}" for k, v in targets.items()))
    say(f"\nbaseline_rps={summary['baseline_rps']:.0f} soldout_p99_ratio={summary['soldout_p99_ratio']:.2f} "
        f"rounds={rounds}")
    say(
        f"soldout_ratio={summary['soldout_ratio']:.2f} selling_ratio={summary['selling_ratio']:.2f} "
        f"gate_vs_mysql={summary.get('gate_vs_mysql', 0):.2f} mysql_per_click={summary['mysql_per_click']:.3f} "
        f"confirm_lag_s={summary['confirm_lag_s']:.2f} pay_ratio={summary['pay_ratio']:.2f} "
        f"pay_p99_ratio={summary['pay_p99_ratio']:.2f} floor_rps={summary['floor_rps']:.0f} "
        f"floor_ratio={summary['floor_ratio']:.2f} drain_rate={summary.get('drain_rate', 0):.0f} "
        f"oversold={oversold} lost={lost} verdict={'ok' if ok else 'FAIL'} "
        f"server={server_name} loadgen_cpu_share={summary['loadgen_cpu_share']:.2f}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
