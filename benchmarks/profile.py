"""Where the web tier's CPU goes, per phase: py-spy on every web process.

    .venv/bin/python -m benchmarks.profile [--phase soldout|selling|pay|floor|all] [--seconds S]
                                           [--rounds N] [--no-profile] [--server granian|gunicorn]

It runs a stack of its own (database seckill_profile, Redis db 11, queue
seckill-profile, its own port), so it can run beside the benchmark. Each round
drives the phases with the benchmark's load generators (wrk where no response
body is needed and wrk is installed, else the asyncio client) and counts the
CPU the web processes spent per request, from /proc as the benchmark does;
those rounds run without the profiler, whose sampling costs the processes it
reads. Then one more round runs with `py-spy record` attached to every process
of the web tier, and prints, per phase, the functions with the most samples of
their own and the most samples under them (cumulative), each also as
microseconds per request (samples / rate / requests). The raw stacks stay in
var/profile/<phase>-<pid>.txt (py-spy's collapsed format, for flamegraph.pl
or speedscope).

py-spy sees Python frames only: the HTTP server's own native code (granian is
Rust) is in the web CPU per request but in no sample.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from benchmarks import loadgen, wrk
from benchmarks.harness import HOST, ROOT, processes, say, stores
from benchmarks.harness.cpu import cpu_delta, cpu_seconds, proc_table, tree
from benchmarks.harness.load import accepted_ids, order_requests

# A store set of its own, never the benchmark's (seckill_bench, db 5, seckill-bench).
# Throttling off: the generator's buyers click far faster than 10/s each (and pay faster than 20/s).
# The backlog's gate (core.admission) queues as many requests as the generator
# has connections, whichever process accepts them: a refusal (a cheap 503)
# would dilute the cost of a click served, which is what is measured here.
CONCURRENCY = 64
stores.configure(db_name="seckill_profile", redis_db=11, queue="seckill-profile",
                 web_db_user="seckill_profile_web",
                 extra_env={"SECKILL_THROTTLE_RATE": "0", "SECKILL_ORDER_CALLS_RATE": "0",
                            "SECKILL_WEB_QUEUE": str(CONCURRENCY)})

PHASES = ("selling", "soldout", "pay", "floor")
CPU_KEYS = ("web", "worker", "mariadb", "redis", "rabbitmq")
CORES = os.cpu_count() or 1
PY_SPY = Path(sys.executable).parent / "py-spy"
RATE = 250  # samples per second per process


# --- load ------------------------------------------------------------------------------

class Stack:
    """The servers of one run and the data the phases share."""

    def __init__(self, *, server: str, workers: int, concurrency: int, buyers: int):
        say("setting up a fresh database seckill_profile, Redis db 11 and queue seckill-profile ...")
        stores.fresh_stores()
        self.tokens = stores.make_buyers(buyers)
        self.concurrency = concurrency
        self.port = 17100 + random.randint(0, 199)
        self.floor_port = self.port + 200
        self.worker = processes.start_worker(log="profile-worker.log")
        self.web = processes.start_web(self.port, workers, log="profile-web.log", server=server)
        self.floor = None
        self.server, self.workers = server, workers
        self.sold_out = stores.new_sku(1, limit=10)
        # Sell it out and warm every process (token records, code paths, the publisher).
        loadgen.run(host=HOST, port=self.port, concurrency=8, total_requests=200,
                    make_request=order_requests("/api/v1/orders", self.tokens, self.sold_out, key_prefix="warm"))
        self.orders: list[tuple[str, str]] = []  # (order id, owner's token) the last selling phase made
        self.round = 0

    def floor_server(self) -> processes.Server:
        if self.floor is None:
            self.floor = processes.web_server(self.server, "benchmarks.floor:application", self.floor_port,
                                            self.workers, dict(os.environ), "profile-floor.log")
        return self.floor

    def stop(self) -> None:
        for server in (self.web, self.floor, self.worker):
            if server is not None:
                server.stop()

    def web_pids(self, server: processes.Server) -> list[int]:
        table = proc_table()
        return sorted(tree(table, server.p.pid))


def drive(stack: Stack, phase: str, seconds: float) -> tuple[dict, str]:
    """One phase's load; its figures (loadgen.summarize's shape) and the generator."""
    c, tag = stack.concurrency, f"{phase}-{stack.round}-{random.randint(0, 10 ** 6)}"
    if phase in ("soldout", "floor"):
        if phase == "floor":
            stack.floor_server()
        port = stack.port if phase == "soldout" else stack.floor_port
        sku = stack.sold_out if phase == "soldout" else "FLOOR"
        path = "/api/v1/orders" if phase == "soldout" else "/floor"
        if wrk.available():
            body = json.dumps({"sku_id": sku, "quantity": 1}).encode()
            return wrk.run(host=HOST, port=port, path=path, tokens=stack.tokens, body=body, key_prefix=tag,
                           concurrency=c, seconds=seconds), "wrk"
        results = loadgen.run_procs(processes=CORES, host=HOST, port=port, concurrency=c, duration_s=seconds,
                                    make_request=order_requests(path, stack.tokens, sku, key_prefix=tag))
        return loadgen.summarize(results), f"asyncio x{CORES}"
    if phase == "selling":
        # Every 202's body is needed (the orders pay will pay): the asyncio client.
        sku = stores.new_sku(10 ** 6, limit=10 ** 6)
        used: dict[int, str] = {}
        results = loadgen.run_procs(processes=CORES, host=HOST, port=stack.port, concurrency=c,
                                    duration_s=seconds, shared=used, timeout_s=30,
                                    make_request=order_requests("/api/v1/orders", stack.tokens, sku, used,
                                                                key_prefix=tag))
        stack.orders = [(json.loads(r.body)["order_id"], used[r.index]) for r in results if r.status == 202]
        # Inside the phase: the worker's confirms are part of what a selling click costs (cpu_ms_selling).
        _wait_confirmed(sku, len(accepted_ids(results)))
        return loadgen.summarize(results), f"asyncio x{CORES}"
    if phase == "pay":
        jobs = [("pay" if random.random() < 0.8 else "cancel", oid, tok) for oid, tok in stack.orders]
        stack.orders = []
        # Paid within the phase's time at the rate pay reaches here (~1 000/s a process).
        jobs = jobs[:int(seconds * 1000 * stack.workers)]

        def make(i: int):
            kind, order_id, token = jobs[i]
            return ("POST", f"/api/v1/orders/{order_id}/{kind}", {"Authorization": f"Token {token}"}, b"")

        results = loadgen.run_procs(processes=CORES, host=HOST, port=stack.port, concurrency=c,
                                    total_requests=len(jobs), make_request=make, timeout_s=30)
        return loadgen.summarize(results), f"asyncio x{CORES}"
    raise ValueError(phase)


def _wait_confirmed(sku_id: str, units: int, timeout: float = 120) -> None:
    """Until MySQL holds every accepted order (pay needs them), like run.wait_locked."""
    from inventory.models import Sku

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s = Sku.objects.get(pk=sku_id)
        if s.total_stock - s.available_stock - s.frozen_stock >= units:
            return
        time.sleep(0.05)
    say(f"    !! {sku_id}: not every accepted order confirmed within {timeout:.0f} s")


def prepare(stack: Stack, phase: str, seconds: float) -> None:
    """What a phase needs before it is measured: pay, the orders of a sale."""
    if phase == "pay" and not stack.orders:
        drive(stack, "selling", seconds)


def measure(stack: Stack, phase: str, seconds: float) -> dict:
    """CPU per request of one phase, by server group (ms), with its figures."""
    prepare(stack, phase, seconds)
    cpu0 = cpu_seconds()
    s, gen = drive(stack, phase, seconds)
    cpu = cpu_delta(cpu0)
    n = max(1, s["requests"])
    ms = {k: 1000 * cpu[k] / n for k in CPU_KEYS}
    if phase == "floor":  # no store takes part: only the web group (the site's server idles)
        ms = {"web": ms["web"]}
    return {"phase": phase, "rps": s["rps"], "requests": s["requests"], "statuses": s["by_status"],
            "generator": gen, "ms": ms, "all_ms": sum(ms.values())}


def line(m: dict) -> str:
    cpu = ", ".join(f"{k} {v:.3f}" for k, v in m["ms"].items())
    return (f"{m['phase']:<8} {m['rps']:7.0f} req/s  CPU ms/req: {cpu}  (all {m['all_ms']:.3f})  "
            f"{m['statuses']}  [{m['generator']}]")


# --- the profiler ------------------------------------------------------------------------

def profiled(stack: Stack, phase: str, seconds: float, top: int) -> dict:
    """One phase with py-spy on every web process; prints the top functions."""
    server = stack.floor_server() if phase == "floor" else stack.web
    out_dir = ROOT / "var" / "profile"
    out_dir.mkdir(parents=True, exist_ok=True)
    prepare(stack, phase, seconds)
    spies = []
    for pid in stack.web_pids(server):
        out = out_dir / f"{phase}-{pid}.txt"
        out.unlink(missing_ok=True)
        # --nonblocking: read the process without pausing it (pausing inflates its CPU);
        # --gil: only the thread holding the GIL, the one spending Python CPU.
        args = [str(PY_SPY), "record", "--pid", str(pid), "--format", "raw", "--output", str(out),
                "--rate", str(RATE), "--nonblocking", "--gil", "--duration", str(int(seconds * 3) + 30)]
        spies.append((subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), out))
    time.sleep(1.0)  # py-spy attaches
    m = measure(stack, phase, seconds)
    for p, _ in spies:
        p.send_signal(2)  # SIGINT: py-spy writes what it has and stops
    stacks: Counter[tuple[str, ...]] = Counter()
    for p, out in spies:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
        if out.exists():
            stacks.update(read_raw(out.read_text()))
    report(phase, stacks, m, top)
    return m


def read_raw(text: str) -> Counter[tuple[str, ...]]:
    """py-spy's raw (collapsed) format: "frame;frame;... count" a line, the
    root first; each frame "function (file:line)"."""
    out: Counter[tuple[str, ...]] = Counter()
    for row in text.splitlines():
        frames, _, count = row.rpartition(" ")
        if frames and count.isdigit():
            out[tuple(_function(f) for f in frames.split(";"))] += int(count)
    return out


def _function(frame: str) -> str:
    """"name (path:line)" -> "name (short path)": one entry per function."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for prefix in (str(ROOT) + "/", "site-packages/", "lib/python3"):
        if prefix in path:
            path = path.split(prefix, 1)[1]
    return f"{name} ({path})"


def report(phase: str, stacks: Counter[tuple[str, ...]], m: dict, top: int) -> None:
    total = sum(stacks.values())
    say(f"\n== {phase}: {line(m)}")
    if not total:
        say("    no samples (is py-spy allowed to read the processes?)")
        return
    per_req = 1e6 / RATE / max(1, m["requests"])  # microseconds of one sample, per request
    say(f"    {total} samples over the web processes = {total * per_req:.0f} us of Python per request "
        f"(web CPU {1000 * m['ms']['web']:.0f} us)")
    own: Counter[str] = Counter()
    cum: Counter[str] = Counter()
    for frames, n in stacks.items():
        own[frames[-1]] += n
        for f in set(frames):
            cum[f] += n
    for title, counts in (("own time", own), ("cumulative", cum)):
        say(f"    -- top {top} by {title}: share of samples, us per request")
        for f, n in counts.most_common(top):
            say(f"    {100 * n / total:5.1f}%  {n * per_req:6.1f}  {f}")


# --- main -------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phase", choices=(*PHASES, "all"), default="all",
                    help="all: selling, sold out, pay (the floor only when named)")
    ap.add_argument("--seconds", type=float, default=5.0, help="per phase")
    ap.add_argument("--rounds", type=int, default=2, help="rounds measured without the profiler")
    ap.add_argument("--no-profile", action="store_true", help="only the measured rounds")
    ap.add_argument("--server", choices=processes.WEB_SERVERS, default="granian")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=CONCURRENCY, help="at most SECKILL_WEB_QUEUE")
    ap.add_argument("--buyers", type=int, default=500)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", action="store_true", help="end with one JSON line of the measured figures")
    args = ap.parse_args()
    phases = ("selling", "soldout", "pay") if args.phase == "all" else (args.phase,)

    stack = Stack(server=args.server, workers=args.workers, concurrency=args.concurrency, buyers=args.buyers)
    rows: dict[str, list[dict]] = {p: [] for p in phases}
    try:
        for r in range(args.rounds):
            stack.round = r
            for phase in phases:
                m = measure(stack, phase, args.seconds)
                rows[phase].append(m)
                say(f"    r{r + 1} {line(m)}")
        if rows and args.rounds:
            say("\n    per phase, median (min - max) over the rounds, CPU ms per request:")
            for phase, ms in rows.items():
                web = [m["ms"]["web"] for m in ms]
                every = [m["all_ms"] for m in ms]
                say(f"    web_ms_{phase}={statistics.median(web):.3f} ({min(web):.3f} - {max(web):.3f})"
                    f"  cpu_ms_{phase}={statistics.median(every):.3f} ({min(every):.3f} - {max(every):.3f})")
        if not args.no_profile:
            stack.round = args.rounds
            for phase in phases:
                profiled(stack, phase, args.seconds, args.top)
    finally:
        stack.stop()
    if args.json:
        print(json.dumps({p: [{"web": m["ms"]["web"], "all": m["all_ms"], "rps": m["rps"]} for m in ms]
                          for p, ms in rows.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
