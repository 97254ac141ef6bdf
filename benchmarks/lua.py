"""One Redis shard's ceiling on a single SKU: the real reserve.lua under redis-benchmark.

    bash scripts/bench --lua [--requests N] [--clients C] [--pipeline P] [--rounds R]
    .venv/bin/python -m benchmarks.lua ...

Every reserve of one SKU runs on the master holding its hash tag, one script
at a time (Redis runs scripts on its one thread), so that master's Lua is the
ceiling of a one-SKU sale whatever the web tier and the Redis Cluster around
it: adding shards spreads SKUs, never one SKU's clicks.

It starts a redis-server of its own on a free port (nothing else on it: its
CPU is the script's), creates two SKUs the way the app does
(inventory.services.skus.sku_create, which warms the snapshot with the
project's own code) in a database of its own (seckill_lua): one selling (a
stock no run can sell out, no per-user limit in reach), one sold out (stock 0);
checks one reserve of each through the app's own call (inventory.redis.gate:
OK and SOLD_OUT), then drives EVALSHA of that script (as core.redis.scripts assembles
and loads it: core/lua/_lib.lua, inventory/lua/_lib.lua, reserve.lua) with the
app's keys and arguments with redis-benchmark, the buyer, idempotency key and
order id random on every call (__rand_int__), so each selling call takes a
unit: the whole path of a reserve, writes included. The two are interleaved
over the rounds; the median and spread are printed, and checked: the selling
SKU's stock must have gone down by about the calls made (an error reply is
fast too: it would pass for a ceiling).

Figures per SKU state: redis-benchmark's ops/s and p50/p99 (on this machine,
where redis-benchmark shares the cores with the server), the server's CPU per
call (its utime+stime from /proc over the calls: parsing, the script, the
reply) and Redis's own time inside the command (INFO commandstats
usec_per_call), and the ceiling one core gives: 1 s / the server's CPU per
call. The last line is a key=value summary (lua_reserve_selling_ops=...).
"""
from __future__ import annotations

import argparse
import csv
import io
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.harness import HOST, processes, progress, say, stores

DB_NAME = "seckill_lua"
QUEUE = "seckill-lua"
# Placeholders redis-benchmark replaces on every call with a random 12-digit number.
RAND = "__rand_int__"
KEYSPACE = 10 ** 9


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class OwnRedis:
    """A redis-server of this run's own: no persistence, on a free loopback port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="seckill-lua-redis-")
        self.p = subprocess.Popen(
            ["redis-server", "--bind", HOST, "--port", str(self.port), "--save", "", "--appendonly", "no",
             "--dir", self.dir, "--daemonize", "no", "--loglevel", "warning", "--logfile", f"{self.dir}/redis.log"],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=processes.die_with_parent())
        processes.wait_port(self.port, timeout=10)

    def cpu_seconds(self) -> float:
        rest = Path(f"/proc/{self.p.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def bench_command(port: int, *, clients: int, requests: int, pipeline: int, command: list[str]) -> dict:
    """Run redis-benchmark on `command`; its CSV row as numbers (rps, p50_latency_ms, ...)."""
    out = subprocess.run(
        ["redis-benchmark", "-h", HOST, "-p", str(port), "-c", str(clients), "-n", str(requests),
         "-r", str(KEYSPACE), "-P", str(pipeline), "--csv", *command],
        capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"redis-benchmark failed ({out.returncode}): {out.stderr.strip() or out.stdout.strip()}")
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    if not rows:
        raise SystemExit(f"redis-benchmark printed no figures: {out.stdout!r} {out.stderr!r}")
    return {k: float(v) for k, v in rows[-1].items() if k != "test"}


def evalsha_stats(client) -> tuple[int, float]:
    """EVALSHA calls so far and Redis's own microseconds inside them."""
    s = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(s.get("calls", 0)), float(s.get("usec", 0))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lua", action="store_true", help=argparse.SUPPRESS)  # bash scripts/bench --lua passes it on
    ap.add_argument("--requests", type=int, default=200_000, help="calls per state and round (default 200000)")
    ap.add_argument("--clients", type=int, default=50, help="redis-benchmark connections (default 50)")
    ap.add_argument("--pipeline", type=int, default=1,
                    help="calls in flight per connection (default 1: the web tier sends one reserve at a time)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if not shutil.which("redis-benchmark"):
        raise SystemExit("no redis-benchmark: apt-get install redis-tools")

    server = OwnRedis()
    try:
        stores.configure(db_name=DB_NAME, redis_db=0, queue=QUEUE, redis_url=f"redis://{HOST}:{server.port}/0")
        say(f"a redis-server of its own on {HOST}:{server.port} (nothing else on it), database {DB_NAME} ...")
        stores.fresh_stores()
        return measure(server, args)
    finally:
        server.stop()


def _skus_checked() -> tuple[str, str]:
    """A selling SKU (a stock no run sells out, no per-user limit in reach) and a
    sold-out one, each checked with the app's own call first: the keys are warm,
    the script loaded, the answers the expected ones."""
    from inventory.redis import gate
    from inventory.redis.keys import Reserve

    selling = stores.new_sku(2 * 10 ** 9, limit=10 ** 9, prefix="LUA-SELL")
    sold_out = stores.new_sku(0, limit=10, prefix="LUA-OUT")
    for sku_id, want in ((selling, Reserve.OK), (sold_out, Reserve.SOLD_OUT)):
        got = gate.reserve(sku_id=sku_id, user_id=1, quantity=1, idempotency_key="check", order_id="o-check").code
        if got is not want:
            raise SystemExit(f"reserve on {sku_id}: {got.name}, expected {want.name}")
    return selling, sold_out


def _command(client, sku_id: str) -> list[str]:
    """EVALSHA of reserve.lua as the app calls it, the buyer, key and order id random per call."""
    from inventory.redis import gate

    call = gate.reserve_call(sku_id=sku_id, user_id=RAND, quantity=1, idempotency_key=f"k{RAND}",
                             order_id=f"o{RAND}-{RAND}")
    if not client.script_exists(call.script.sha)[0]:
        raise SystemExit("reserve.lua is not loaded under the sha the app computes")
    return ["EVALSHA", call.script.sha, str(len(call.keys)), *map(str, call.keys), *map(str, call.args)]


def _round(server: OwnRedis, client, args, name: str, command: list[str]) -> dict:
    """One redis-benchmark run of a state's command, with the server's CPU and Redis's own time per call."""
    calls0, usec0 = evalsha_stats(client)
    cpu0 = server.cpu_seconds()
    fig = bench_command(server.port, clients=args.clients, requests=args.requests, pipeline=args.pipeline,
                        command=command)
    cpu = server.cpu_seconds() - cpu0
    calls1, usec1 = evalsha_stats(client)
    calls = max(1, calls1 - calls0)
    fig.update(server_us=1e6 * cpu / calls, script_us=(usec1 - usec0) / calls, calls=calls)
    return fig


def _figures(rows: dict[str, list[dict]]) -> dict[str, float]:
    """Per state, the medians over the rounds (printed) as summary keys."""
    summary: dict[str, float] = {}
    say("\n    state      ops/s median (min - max)      p50 ms   p99 ms   server CPU us/call   "
        "script us/call   one core's ceiling ops/s")
    for name, figs in rows.items():
        key = name.replace(" ", "")
        ops = [f["rps"] for f in figs]
        us = statistics.median(f["server_us"] for f in figs)
        summary[f"lua_reserve_{key}_ops"] = statistics.median(ops)
        summary[f"lua_reserve_{key}_p50_ms"] = statistics.median(f["p50_latency_ms"] for f in figs)
        summary[f"lua_reserve_{key}_p99_ms"] = statistics.median(f["p99_latency_ms"] for f in figs)
        summary[f"lua_reserve_{key}_us"] = us
        summary[f"lua_reserve_{key}_ceiling"] = 1e6 / us if us else 0.0
        say(f"    {name:<9} {statistics.median(ops):9.0f} ({min(ops):.0f} - {max(ops):.0f})   "
            f"{summary[f'lua_reserve_{key}_p50_ms']:8.3f} {summary[f'lua_reserve_{key}_p99_ms']:8.3f}   "
            f"{us:18.1f}   {statistics.median(f['script_us'] for f in figs):14.1f}   "
            f"{summary[f'lua_reserve_{key}_ceiling']:.0f}")
    return summary


def measure(server: OwnRedis, args) -> int:
    from core.redis.connection import redis
    from inventory.redis.live import live_stock

    selling, sold_out = _skus_checked()
    client = redis()
    commands = {"selling": _command(client, selling), "sold out": _command(client, sold_out)}
    say(f"    reserve.lua as the app loads it: sha {commands['selling'][1]}, {commands['selling'][2]} keys; "
        f"{args.requests} calls per state and round, {args.clients} connections, pipeline {args.pipeline}")
    rows: dict[str, list[dict]] = {k: [] for k in commands}
    stock0 = live_stock(sku_id=selling).available
    for r in range(args.rounds):
        progress(f"round {r + 1}/{args.rounds}")
        for name in (commands if r % 2 == 0 else list(commands)[::-1]):
            fig = _round(server, client, args, name, commands[name])
            rows[name].append(fig)
            say(f"    r{r + 1} {name:<8} {fig['rps']:9.0f} ops/s  p50 {fig['p50_latency_ms']:.3f} ms  "
                f"p99 {fig['p99_latency_ms']:.3f} ms  server CPU {fig['server_us']:.1f} us/call "
                f"(inside the script {fig['script_us']:.1f} us)")
    taken = stock0 - live_stock(sku_id=selling).available
    made = sum(f["calls"] for f in rows["selling"])
    # a random collision of buyer and key is a duplicate (nothing taken): a few in a million
    ok = taken >= 0.99 * made and live_stock(sku_id=sold_out).available == 0
    say(f"    the selling SKU's stock went down by {taken} for {made} calls; the sold-out SKU still 0: "
        f"{'ok' if ok else 'NOT the reserve path: see the Redis replies'}")
    summary = _figures(rows)
    say(f"    (ops/s: redis-benchmark on {os.cpu_count()} shared cores, its own CPU beside the server's; the "
        "ceiling: one core's second over the server's CPU per call, what one shard gives one SKU when "
        "Redis has its core to itself. A sold-out click in the app mostly stops at the web tier's "
        "sold-out memo, never reaching this script)")
    say("\n" + " ".join(f"{k}={v:.0f}" if k.endswith(("_ops", "_ceiling")) else f"{k}={v:.3f}" if k.endswith("_ms")
                        else f"{k}={v:.1f}" for k, v in summary.items())
        + f" lua_clients={args.clients} lua_pipeline={args.pipeline} verdict={'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
