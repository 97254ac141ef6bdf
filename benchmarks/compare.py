"""The web servers side by side on our app: each server runs the site and the
floor at once, and every round drives the benchmark's phases on each server in
turn (the order rotates from round to round), so a noisy machine weighs on all
of them alike.

    .venv/bin/python -m benchmarks.compare [--servers granian,gunicorn,uwsgi] [--rounds 3] [--phase-seconds 4]

Uses the benchmark's stores (database seckill_bench, Redis db 5, queue
seckill-bench): run it only where `bash scripts/bench` may run. Per phase and
server it prints the rate and the CPU per request (the web tier's, counted on
the server under test alone; and every server's) as median (min - max) over
the rounds, then checks every unit and order of every sale in both stores, so a
server that serves fast but wrongly shows.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import run  # noqa: E402  (configures the stores before Django loads)
from benchmarks import harness, loadgen, wrk  # noqa: E402
from benchmarks.harness import HOST, order_requests, progress, say  # noqa: E402

PHASES = ("floor", "baseline", "sold out", "selling", "pay")


def spread(values: list[float], fmt: str) -> str:
    m, lo, hi = run.median_spread(values)
    return f"{m:{fmt}} ({lo:{fmt}}-{hi:{fmt}})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", default=",".join(harness.WEB_SERVERS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--phase-seconds", type=float, default=4.0)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--web-workers", type=int, default=2)
    ap.add_argument("--buyers", type=int, default=2000)
    args = ap.parse_args()
    servers = [s for s in args.servers.split(",") if s]
    for s in servers:
        if s not in harness.WEB_SERVERS:
            ap.error(f"unknown server {s!r}")
    c, secs = args.concurrency, args.phase_seconds
    run.GENERATOR[0] = "wrk" if wrk.available() else f"asyncio x{run.CORES}"
    run.ASYNC_PROCS[0] = run.CORES

    say("setting up a fresh database seckill_bench, Redis db 5 and queue seckill-bench ...")
    harness.fresh_stores()
    tokens = harness.make_buyers(args.buyers)
    token_of = run.tokens_by_user(tokens)
    worker = harness.start_worker()
    sites: dict[str, tuple[int, harness.Server]] = {}
    floors: dict[str, tuple[int, harness.Server]] = {}
    rows: dict[tuple[str, str], list[run.Phase]] = {(s, p): [] for s in servers for p in PHASES}
    sales: list[tuple[str, str, int, set[str]]] = []
    try:
        for n, name in enumerate(servers):
            port = 18000 + 20 * n + random.randint(0, 9)
            sites[name] = (port, harness.start_web(port, args.web_workers, server=name, log=f"compare-{name}.log",
                                                   extra={"SECKILL_WEB_QUEUE": str(c)}))
            floors[name] = (port + 10, harness.web_server(name, "benchmarks.floor:application", port + 10,
                                                          args.web_workers, dict(os.environ),
                                                          f"compare-{name}-floor.log"))
        out = harness.new_sku(1, limit=10)
        warm = harness.new_sku(10 ** 6)
        for name, (port, _) in sites.items():
            # warm every process of every server (token records, code paths)
            loadgen.run(host=HOST, port=port, concurrency=c, total_requests=2000,
                        make_request=order_requests("/api/v1/orders", tokens, out, key_prefix=f"warm-{name}"))
        say(f"\n{args.rounds} rounds; in each, every server in turn: {', '.join(PHASES)}; {secs:.0f} s phases, "
            f"{c} connections, {args.web_workers} web processes, generator {run.GENERATOR[0]}")
        for r in range(args.rounds):
            order = servers[r % len(servers):] + servers[:r % len(servers)]
            for name in order:
                progress(f"round {r + 1}/{args.rounds}: {name}")
                port, floor_port = sites[name][0], floors[name][0]
                # only the server under test counts as the web tier in this phase
                for other, (_, srv) in list(sites.items()) + list(floors.items()):
                    srv.group = "web" if other == name else "idle web"

                def phase(label, p, load, name=name, r=r):
                    rows[(name, label)].append(run.run_phase(label, p, load, concurrency=c, seconds=secs))
                    say(f"    r{r + 1} {name:<8} " + rows[(name, label)][-1].line())

                phase("floor", floor_port, run.floor_requests(tokens, key_prefix=f"f{r}{name}"))
                phase("baseline", port, run.order_load("/api/v1/baseline", tokens, warm, key_prefix=f"b{r}{name}"))
                phase("sold out", port, run.order_load("/api/v1/orders", tokens, out, key_prefix=f"o{r}{name}"))
                sku = harness.new_sku(10 ** 5, limit=10 ** 6)
                phase("selling", port, run.order_load("/api/v1/orders", tokens, sku, record=True, seed=r,
                                                      key_prefix=f"s{r}{name}"))
                sell = rows[(name, "selling")][-1]
                run.wait_locked(sku, len(sell.accepted))
                owned = sell.owned if sell.owned is not None else run.owners_from_mysql(sku, sell.accepted, token_of)
                phase("pay", port, run.pay_load(owned, seed=r))
                sales.append((name, sku, 10 ** 5, sell.accepted))

        say("\n    phase     server    req/s median (min-max)   web CPU ms/req        all servers CPU ms/req")
        for label in PHASES:
            for name in servers:
                ps = rows[(name, label)]
                say(f"    {label:<9} {name:<9} {spread([p.rps for p in ps], '.0f'):<24} "
                    f"{spread([p.cpu_ms['web'] for p in ps], '.2f'):<21} "
                    f"{spread([p.cpu_ms_all for p in ps], '.2f')}")
        say("\n    loadgen CPU share, highest per server: " + ", ".join(
            f"{name} {max(p.loadgen_share for lbl in PHASES for p in rows[(name, lbl)]):.0%}" for name in servers))
        shed = {name: sum(p.shed for lbl in PHASES for p in rows[(name, lbl)]) for name in servers}
        if any(shed.values()):
            say(f"    !! refused 503: {shed}")

        say("\n    consistency: the order life settled, every sale in both stores")
        quiet = run.settle_life([sku for _, sku, _, _ in sales])
        ok = quiet
        for name, sku, stock, accepted in sales:
            ch = run.check_sku(sku, stock, accepted, gate=True)
            ok = ok and ch["ok"]
            say(f"    {name:<9} " + " ".join(f"{k}={v}" for k, v in ch.items()))
    finally:
        for _, srv in list(sites.values()) + list(floors.values()):
            srv.stop()
        worker.stop()
    say(f"\nservers={','.join(servers)} rounds={args.rounds} verdict={'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
