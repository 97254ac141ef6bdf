"""The fault matrix: sales through every fault and every pair of faults in sequence,
on the real servers, each judged by every unit and order in both stores.

    bash scripts/chaos [--quick] [--only worker-kill,redis-restart] [--list]

Each run sells a fresh SKU to concurrent buyers (some clicking twice with the
same Idempotency-Key) while its faults land one right after the other, lets
the system drain (worker, beat sweeps), reconciles twice, then prints one row:

  attempted  requests sent           accepted   answered 202 (distinct orders)
  confirmed  202s that are orders    failed202  202s that ended FAILED
  lost       202s with no order      duplicated keys answered with two orders
  oversold   units beyond the stock  drift      Redis minus MySQL after reconciling
  in_flight  reservations in flight when a Redis loss landed
  drain_s    from the end of the load to everything confirmed
  pause_s    seconds from the Redis loss to the first sale after it, per SKU
             (the first new order answered to a request sent after the loss)
  n503       requests answered 503 after the Redis loss

After a Redis loss the SKU answers 503 until its snapshot is rebuilt, then
sells again by itself. When the load left no sale after the loss (it ended
during the pause, or while the worker was down), a second wave of fresh clicks
follows until the first 202 or a sold-out answer, so the pause is measured;
its orders are judged with the rest. A run is ok only with nothing lost,
oversold, FAILED after its 202 or twice ordered for one key, and no drift,
Redis loss or not.

The last line is a key=value summary ending in verdict=ok|FAIL. It acts on the
machine's own Redis, RabbitMQ and MariaDB: run it alone.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import signal
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import faults, harness  # noqa: E402
from benchmarks.harness import HOST, progress, say  # noqa: E402

harness.configure(db_name="seckill_chaos", redis_db=6, queue="seckill-chaos", extra_env={
    # Short deadlines so a run drains in seconds; no expiry or reconciliation by
    # beat during a run (the run reconciles itself, at the end).
    "SECKILL_ORPHAN_GRACE_SECONDS": "3",
    "SECKILL_ORPHAN_SWEEP_SECONDS": "2",
    "SECKILL_OUTBOX_SWEEP_SECONDS": "2",
    "SECKILL_EXPIRY_SWEEP_SECONDS": "3600",
    "SECKILL_RECONCILE_SECONDS": "3600",
    "SECKILL_THROTTLE_RATE": "0",
})

from benchmarks import loadgen  # noqa: E402

# The clock loadgen stamps Result.started / .finished with: loss moments are
# taken on it too, so the two compare.
clock = time.perf_counter


@dataclass
class Stack:
    port: int
    web: harness.Server
    worker: harness.Server
    beat: harness.Server


@dataclass
class Context:
    stack: Stack
    sku_id: str
    inflight_at_loss: list[int] = field(default_factory=list)
    redis_loss: bool = False
    losses: list[float] = field(default_factory=list)  # clock() when Redis's keys were gone


def _inflight(sku_id: str) -> int:
    from core.redis import RedisError
    from inventory.redis import live as redis_live

    try:
        live = redis_live.live_stock(sku_id=sku_id)
        return live.inflight if live else 0
    except RedisError:
        return 0


# --- the faults -------------------------------------------------------------------------
# Each lands mid-sale and returns once the system is whole again (a killed
# process restarted, a server back); worker-down instead stops the worker before
# the sale starts and starts it after.

def worker_kill(ctx: Context) -> None:
    ctx.stack.worker.kill()
    time.sleep(0.5)
    ctx.stack.worker.start()
    harness.wait_consuming()


def rabbitmq_restart(ctx: Context) -> None:
    faults.rabbitmq_restart(down_s=1.0)


def _redis_loss(ctx: Context, lose: Callable[[], None]) -> None:
    """Note what is in flight, lose every Redis key, note the moment they were gone."""
    ctx.inflight_at_loss.append(_inflight(ctx.sku_id))
    ctx.redis_loss = True
    lose()
    ctx.losses.append(clock())


def redis_restart(ctx: Context) -> None:
    """Redis stopped without saving and started again empty (the loss is the stop)."""
    _redis_loss(ctx, faults.redis_stop)
    time.sleep(0.5)
    faults.redis_start_empty()


def redis_rollback(ctx: Context) -> None:
    """Redis saves a file, sells on a moment, is killed and comes back from that
    file: data older than what it lost (a failover to a lagging replica)."""
    path = faults.redis_save_snapshot()
    time.sleep(0.1)  # short: at 48 connections the sale would sell out before the kill
    _redis_loss(ctx, faults.redis_stop)
    faults.redis_start_from(path)


def redis_flushall(ctx: Context) -> None:
    """FLUSHALL mid-sale: every key gone, the server up all along."""
    _redis_loss(ctx, faults.redis_flushall)


def mariadb_restart(ctx: Context) -> None:
    faults.mariadb_restart(down_s=2.0)


def web_kill(ctx: Context) -> None:
    """SIGKILL every web worker process at once: requests between their reserve
    and their publish die with them (the server's main process starts new ones;
    connections wait on its socket meanwhile)."""
    for pid in ctx.stack.web.children():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    harness.wait_port(ctx.stack.port)


def worker_down(ctx: Context) -> None:
    """Placeholder: the worker is stopped for the whole sale (see before/after)."""


FAULTS: dict[str, Callable[[Context], None]] = {
    "worker-kill": worker_kill,
    "rabbitmq-restart": rabbitmq_restart,
    "redis-restart": redis_restart,
    "redis-flushall": redis_flushall,
    "redis-rollback": redis_rollback,
    "mariadb-restart": mariadb_restart,
    "web-kill": web_kill,
    "worker-down": worker_down,
}


# --- one run ------------------------------------------------------------------------------

@dataclass
class Row:
    name: str
    attempted: int = 0
    accepted: int = 0
    confirmed: int = 0
    failed202: int = 0
    lost: int = 0
    duplicated: int = 0
    oversold: int = 0
    drift: int | None = None
    in_flight: str = "-"
    drain_s: float = 0.0
    pause_s: float | None = None
    n503: int | None = None
    ok: bool = True
    note: str = ""
    redis_loss: bool = False


def fresh_clicks(tokens: list[str], n: int, rnd: random.Random) -> list[tuple[str, str]]:
    """(token, new key) per request."""
    return [(rnd.choice(tokens), uuid.uuid4().hex) for _ in range(n)]


def clicks(tokens: list[str], n: int, seed: int) -> list[tuple[str, str]]:
    """(token, key) per request; one in ten is sent again later (a retry)."""
    rnd = random.Random(seed)
    first = fresh_clicks(tokens, n, rnd)
    out = list(first)
    for job in rnd.sample(first, n // 10):
        out.insert(rnd.randrange(len(out) // 2, len(out) + 1), job)
    return out


# The second wave: two connections, a click each every WAVE_GAP_S, for up to WAVE_S.
WAVE_CLICKS, WAVE_GAP_S, WAVE_S = 300, 0.2, 30.0


def _body(r: loadgen.Result) -> dict:
    try:
        return json.loads(r.body)
    except ValueError:
        return {}


def _sold_out(r: loadgen.Result) -> bool:
    return r.status == 409 and _body(r).get("code") == "sold_out"


def first_sale_after(results: list[loadgen.Result], moment: float) -> float | None:
    """Seconds from `moment` to the first new order (a 202 that is no replay)
    answered to a request sent after it; None when there was none."""
    done = [r.finished for r in results
            if r.status == 202 and r.started > moment and not _body(r).get("replayed")]
    return min(done) - moment if done else None


def second_wave(port: int, tokens: list[str], jobs: list[tuple[str, str]], make: loadgen.MakeRequest,
                seed: int) -> list[loadgen.Result]:
    """Fresh clicks (new keys, the same buyers), paced, until the first 202, a
    sold-out answer or WAVE_S. `jobs` grows by them and their results' indexes
    point into it, like the load's."""
    base = len(jobs)
    jobs.extend(fresh_clicks(tokens, WAVE_CLICKS, random.Random(seed)))
    wave = loadgen.run(host=HOST, port=port, concurrency=2, make_request=lambda i: make(base + i),
                       total_requests=WAVE_CLICKS, duration_s=WAVE_S, timeout_s=10, gap_s=WAVE_GAP_S,
                       stop_when=lambda r: r.status == 202 or _sold_out(r))
    for r in wave:
        r.index += base
    return wave


def measure_pause(row: Row, ctx: Context, results: list[loadgen.Result],
                  wave: Callable[[], list[loadgen.Result]]) -> None:
    """pause_s and n503 of a Redis-loss run. When the load left no sale after
    the (last) loss, the second wave's results join `results` first."""
    pause = first_sale_after(results, ctx.losses[-1])
    if pause is None:
        results.extend(wave())
        pause = first_sale_after(results, ctx.losses[-1])
    row.pause_s = pause
    row.n503 = sum(1 for r in results if r.status == 503 and r.finished > ctx.losses[0])
    if pause is None:
        sold_out = any(_sold_out(r) for r in results if r.finished > ctx.losses[-1])
        row.note = "no sale after the loss: " + ("sold out" if sold_out else f"none within the {WAVE_S:.0f} s wave")


def run_once(stack: Stack, tokens: list[str], names: tuple[str, ...], *, stock: int, demand: int,
             concurrency: int) -> Row:
    from django.db import close_old_connections

    from reconciliation.services import ReconciliationBusy, reconciliation_run

    row = Row(" + ".join(names))
    sku_id = harness.new_sku(stock, limit=4, prefix="CHAOS")
    ctx = Context(stack, sku_id)
    seed = hash(row.name) & 0xFFFF
    jobs = clicks(tokens, demand, seed=seed)
    body = json.dumps({"sku_id": sku_id, "quantity": 1}).encode()

    def make(i: int):
        token, key = jobs[i]
        return ("POST", "/api/v1/orders", {"Authorization": f"Token {token}", "Content-Type": "application/json",
                                           "Idempotency-Key": key}, body)

    down_all_sale = "worker-down" in names
    if down_all_sale:
        stack.worker.stop()
    results: list = []
    load = threading.Thread(target=lambda: results.extend(loadgen.run(
        host=HOST, port=stack.port, concurrency=concurrency, make_request=make, total_requests=len(jobs),
        timeout_s=30)))
    load.start()
    # the faults land one right after the other, from about a quarter into the sale
    from core.redis import RedisError
    from inventory.redis import gate, live as redis_live

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            live = redis_live.live_stock(sku_id=sku_id)
            if live and live.available <= stock * 3 // 4:
                break
        except RedisError:
            pass
        time.sleep(0.02)
    for name in names:
        progress(f"{row.name}: {name}")
        FAULTS[name](ctx)
        close_old_connections()
    load.join()
    if down_all_sale:
        stack.worker.start()
        harness.wait_consuming()
    if ctx.losses:
        measure_pause(row, ctx, results, lambda: second_wave(stack.port, tokens, jobs, make, seed + 1))
    last_fault = time.monotonic()

    # --- judge -------------------------------------------------------------------------
    from orders.models import Order

    by_click: dict[tuple[str, str], set[str]] = {}
    for r in results:
        if r.status == 202:
            by_click.setdefault(jobs[r.index], set()).add(_body(r)["order_id"])
    accepted = set().union(*by_click.values()) if by_click else set()
    row.attempted, row.accepted = len(results), len(accepted)
    row.duplicated = sum(1 for ids in by_click.values() if len(ids) > 1)

    def drained() -> bool:
        close_old_connections()
        try:
            if gate.inflight_entries(sku_id=sku_id):
                return False
        except RedisError:
            return False
        return Order.objects.filter(pk__in=accepted).count() == len(accepted)

    wait_until = time.monotonic() + 180
    while time.monotonic() < wait_until and not drained():
        time.sleep(0.2)
    row.drain_s = time.monotonic() - last_fault
    for _ in range(2):
        for _attempt in range(20):
            try:
                reconciliation_run(trigger="command", observe_gap_s=0.2, sku_ids=[sku_id])
                break
            except ReconciliationBusy:
                time.sleep(0.5)
    b = harness.balance(sku_id, stock, accepted)
    row.confirmed, row.failed202, row.lost, row.oversold, row.drift = (
        b.confirmed, b.failed_after_202, b.lost, b.oversold, b.drift)
    # (Orders with no 202 behind them are requests interrupted by a kill: their
    # clients got no answer, a retry with the key gets the order. Not duplicates.)
    if ctx.inflight_at_loss:
        row.in_flight = "/".join(str(n) for n in ctx.inflight_at_loss)
    # Redis loss or not: nothing fails after its 202 and no key gets two orders.
    row.redis_loss = ctx.redis_loss
    # After a loss the SKU must sell again by itself (or answer sold out from its rebuilt snapshot).
    sells_again = not ctx.losses or row.pause_s is not None or row.note.endswith("sold out")
    row.ok = (b.balanced and row.lost == 0 and row.oversold == 0 and row.drift in (0, None)
              and row.failed202 == 0 and row.duplicated == 0 and sells_again)
    if not b.balanced:
        row.note = "; ".join(filter(None, ("buckets do not add up", row.note)))
    return row


# Redis losses every plan holds (when their faults are chosen): alone, while the
# worker is down for the whole sale, and just before and after a worker kill.
LOSS_RUNS = [("redis-flushall",), ("redis-restart",), ("redis-rollback",), ("worker-down", "redis-restart"),
             ("redis-restart", "worker-kill"), ("worker-kill", "redis-flushall"), ("redis-rollback", "web-kill")]


def plan(only: list[str] | None, quick: bool) -> list[tuple[str, ...]]:
    names = only or list(FAULTS)
    singles = [(n,) for n in names]
    pairs = [p for p in itertools.permutations(names, 2) if "worker-down" not in p or p[0] == "worker-down"]
    if quick:
        pairs = pairs[:: max(1, len(pairs) // 6)][:6]
    losses = [run for run in LOSS_RUNS if set(run) <= set(names)]
    return list(dict.fromkeys(singles + pairs + losses))


COLUMNS = ("attempted", "accepted", "confirmed", "failed202", "lost", "duplicated", "oversold", "drift",
           "in_flight", "drain_s", "pause_s", "n503")


def cell(row: Row, column: str) -> str:
    """One table cell, ten wide: seconds to one decimal, "-" for nothing."""
    value = getattr(row, column)
    if value is None:
        return f"{'-':>10}"
    return f"{value:>10.1f}" if isinstance(value, float) else f"{str(value):>10}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="every fault alone, six pairs and the Redis-loss runs")
    ap.add_argument("--only", help="comma-separated faults (with their pairs)")
    ap.add_argument("--list", action="store_true", help="list the faults and exit")
    ap.add_argument("--stock", type=int, default=300)
    ap.add_argument("--demand", type=int, default=1200, help="clicks per run (plus one in ten retried)")
    ap.add_argument("--buyers", type=int, default=600)
    ap.add_argument("--concurrency", type=int, default=48)
    ap.add_argument("--server", choices=("granian", "gunicorn"), default="granian",
                    help="the web tier's server (default granian, as deployed)")
    args = ap.parse_args()
    if args.list:
        for name, fn in FAULTS.items():
            say(f"{name}: {(fn.__doc__ or '').strip().splitlines()[0] if fn.__doc__ else ''}")
        return 0
    only = args.only.split(",") if args.only else None
    unknown = set(only or ()) - set(FAULTS)
    if unknown:
        raise SystemExit(f"unknown fault(s): {', '.join(sorted(unknown))}; see --list")
    runs = plan(only, args.quick)

    say("setting up a fresh database seckill_chaos, Redis db 6 and queue seckill-chaos ...")
    faults.ensure_up()
    harness.fresh_stores()
    tokens = harness.make_buyers(args.buyers)
    port = 19000 + random.randint(0, 999)
    stack = Stack(port, harness.start_web(port, 2, log="chaos-web.log", server=args.server),
                  harness.start_worker(log="chaos-worker.log"), harness.start_beat(log="chaos-beat.log"))
    rows: list[Row] = []
    say(f"{len(runs)} runs: stock {args.stock}, {args.demand} clicks each (+10 % retried), "
        f"{args.concurrency} connections, web server {args.server}\n")
    say(f"{'run':<36} " + " ".join(f"{c:>10}" for c in COLUMNS) + "  verdict")
    try:
        for i, names in enumerate(runs, 1):
            progress(f"run {i}/{len(runs)}: {' + '.join(names)}")
            try:
                row = run_once(stack, tokens, names, stock=args.stock, demand=args.demand,
                               concurrency=args.concurrency)
            except Exception as exc:  # a run that could not complete is a failed run
                row = Row(" + ".join(names), ok=False, note=repr(exc)[:200])
                faults.ensure_up()
                for server in (stack.web, stack.worker, stack.beat):
                    if not server.alive:
                        server.start()
            rows.append(row)
            say(f"{row.name:<36} " + " ".join(cell(row, c) for c in COLUMNS)
                + f"  {'ok' if row.ok else 'FAIL'} {row.note}")
    finally:
        for server in (stack.web, stack.worker, stack.beat):
            server.stop()
        faults.ensure_up()

    total = {k: sum(getattr(r, k) for r in rows) for k in ("attempted", "accepted", "lost", "oversold", "failed202")}
    failed_clean = sum(r.failed202 for r in rows if not r.redis_loss)
    dup_clean = sum(r.duplicated for r in rows if not r.redis_loss)
    dup_loss = sum(r.duplicated for r in rows if r.redis_loss)
    drift = sum(abs(r.drift or 0) for r in rows)
    pauses = [r.pause_s for r in rows if r.pause_s is not None]
    pause_max, pause_median = (f"{max(pauses):.1f}", f"{statistics.median(pauses):.1f}") if pauses else ("-", "-")
    ok = all(r.ok for r in rows)
    say(f"\nruns={len(rows)} attempted={total['attempted']} accepted={total['accepted']} "
        f"failed_after_202={total['failed202']} failed_after_202_without_redis_loss={failed_clean} "
        f"duplicated_after_redis_loss={dup_loss} drift={drift} lost={total['lost']} oversold={total['oversold']} "
        f"duplicated={dup_clean} pause_s_max={pause_max} pause_s_median={pause_median} "
        f"verdict={'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
