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

from benchmarks import loadgen, wrk
from benchmarks.bench import generators, options
from benchmarks.bench.generators import order_load, run_phase
from benchmarks.bench.loads import floor_requests, owners_from_mysql, pay_load, tokens_by_user
from benchmarks.bench.phase import CORES, Phase, median_spread
from benchmarks.bench.settle import check_sku, settle_life, wait_locked
from benchmarks.harness import HOST, processes, progress, say, stores
from benchmarks.harness.load import order_requests
from benchmarks.harness.processes import Server

PHASES = ("floor", "baseline", "sold out", "selling", "pay")
SELLING_STOCK = 10 ** 5


def spread(values: list[float], fmt: str) -> str:
    m, lo, hi = median_spread(values)
    return f"{m:{fmt}} ({lo:{fmt}}-{hi:{fmt}})"


class Sites:
    """Each server's site and floor, the buyers, and every phase's figures."""

    def __init__(self, servers: list[str], args: argparse.Namespace):
        self.servers, self.args, self.c, self.secs = servers, args, args.concurrency, args.phase_seconds
        self.tokens = stores.make_buyers(args.buyers)
        self.token_of = tokens_by_user(self.tokens)
        self.sites: dict[str, tuple[int, Server]] = {}
        self.floors: dict[str, tuple[int, Server]] = {}
        self.rows: dict[tuple[str, str], list[Phase]] = {(s, p): [] for s in servers for p in PHASES}
        self.sales: list[tuple[str, str, int, set[str]]] = []
        self.out = self.warm = ""

    def start(self) -> None:
        for n, name in enumerate(self.servers):
            port = 18000 + 20 * n + random.randint(0, 9)
            self.sites[name] = (port, processes.start_web(port, self.args.web_workers, server=name,
                                                          log=f"compare-{name}.log",
                                                          extra={"SECKILL_WEB_QUEUE": str(self.c)}))
            self.floors[name] = (port + 10, processes.web_server(name, "benchmarks.floor:application", port + 10,
                                                                 self.args.web_workers, dict(os.environ),
                                                                 f"compare-{name}-floor.log"))
        self.out = stores.new_sku(1, limit=10)
        self.warm = stores.new_sku(10 ** 6)
        for name, (port, _) in self.sites.items():
            # warm every process of every server (token records, code paths)
            loadgen.run(host=HOST, port=port, concurrency=self.c, total_requests=2000,
                        make_request=order_requests("/api/v1/orders", self.tokens, self.out,
                                                    key_prefix=f"warm-{name}"))

    def stop(self) -> None:
        for _, srv in list(self.sites.values()) + list(self.floors.values()):
            srv.stop()

    def phase(self, name: str, r: int, label: str, port: int, load) -> Phase:
        self.rows[(name, label)].append(run_phase(label, port, load, concurrency=self.c, seconds=self.secs))
        say(f"    r{r + 1} {name:<8} " + self.rows[(name, label)][-1].line())
        return self.rows[(name, label)][-1]

    def one_round(self, name: str, r: int) -> None:
        """The phases on one server; only the server under test counts as the web tier meanwhile."""
        port, floor_port, tokens = self.sites[name][0], self.floors[name][0], self.tokens
        for other, (_, srv) in list(self.sites.items()) + list(self.floors.items()):
            srv.group = "web" if other == name else "idle web"
        self.phase(name, r, "floor", floor_port, floor_requests(tokens, key_prefix=f"f{r}{name}"))
        self.phase(name, r, "baseline", port, order_load("/api/v1/baseline", tokens, self.warm,
                                                         key_prefix=f"b{r}{name}"))
        self.phase(name, r, "sold out", port, order_load("/api/v1/orders", tokens, self.out,
                                                         key_prefix=f"o{r}{name}"))
        sku = stores.new_sku(SELLING_STOCK, limit=10 ** 6)
        sell = self.phase(name, r, "selling", port, order_load("/api/v1/orders", tokens, sku, record=True, seed=r,
                                                               key_prefix=f"s{r}{name}"))
        wait_locked(sku, len(sell.accepted))
        owned = sell.owned if sell.owned is not None else owners_from_mysql(sku, sell.accepted, self.token_of)
        self.phase(name, r, "pay", port, pay_load(owned, seed=r))
        self.sales.append((name, sku, SELLING_STOCK, sell.accepted))

    def report(self) -> None:
        say("\n    phase     server    req/s median (min-max)   web CPU ms/req        all servers CPU ms/req")
        for label in PHASES:
            for name in self.servers:
                ps = self.rows[(name, label)]
                say(f"    {label:<9} {name:<9} {spread([p.rps for p in ps], '.0f'):<24} "
                    f"{spread([p.cpu_ms['web'] for p in ps], '.2f'):<21} "
                    f"{spread([p.cpu_ms_all for p in ps], '.2f')}")
        say("\n    loadgen CPU share, highest per server: " + ", ".join(
            f"{name} {max(p.loadgen_share for lbl in PHASES for p in self.rows[(name, lbl)]):.0%}"
            for name in self.servers))
        shed = {name: sum(p.shed for lbl in PHASES for p in self.rows[(name, lbl)]) for name in self.servers}
        if any(shed.values()):
            say(f"    !! refused 503: {shed}")

    def consistent(self) -> bool:
        say("\n    consistency: the order life settled, every sale in both stores")
        ok = settle_life([sku for _, sku, _, _ in self.sales])
        for name, sku, stock, accepted in self.sales:
            ch = check_sku(sku, stock, accepted, gate=True)
            ok = ok and ch["ok"]
            say(f"    {name:<9} " + " ".join(f"{k}={v}" for k, v in ch.items()))
        return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", default=",".join(processes.WEB_SERVERS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--phase-seconds", type=float, default=4.0)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--web-workers", type=int, default=2)
    ap.add_argument("--buyers", type=int, default=2000)
    args = ap.parse_args()
    servers = [s for s in args.servers.split(",") if s]
    for s in servers:
        if s not in processes.WEB_SERVERS:
            ap.error(f"unknown server {s!r}")
    options.configure(None)
    generators.CHOICE.name = "wrk" if wrk.available() else f"asyncio x{CORES}"
    generators.CHOICE.procs = CORES

    say("setting up a fresh database seckill_bench, Redis db 5 and queue seckill-bench ...")
    stores.fresh_stores()
    sites = Sites(servers, args)
    worker = processes.start_worker()
    try:
        sites.start()
        say(f"\n{args.rounds} rounds; in each, every server in turn: {', '.join(PHASES)}; {args.phase_seconds:.0f} s "
            f"phases, {args.concurrency} connections, {args.web_workers} web processes, generator "
            f"{generators.CHOICE.name}")
        for r in range(args.rounds):
            for name in servers[r % len(servers):] + servers[:r % len(servers)]:
                progress(f"round {r + 1}/{args.rounds}: {name}")
                sites.one_round(name, r)
        sites.report()
        ok = sites.consistent()
    finally:
        sites.stop()
        worker.stop()
    say(f"\nservers={','.join(servers)} rounds={args.rounds} verdict={'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
