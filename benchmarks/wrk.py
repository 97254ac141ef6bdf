"""wrk (the Debian package) as the benchmark's load generator: one C process
on an event loop per thread costs the server's two cores far less than the
Python client. benchmarks/wrk_request.lua varies the token and the
Idempotency-Key per request, counts every status, records the order id of
every 202 when asked (the selling phase's sale), or walks a fixed list of
requests once (the pay phase's pays and cancels).

A phase ends with nothing in flight: at its end every wrk thread stops
sending, waits for the answers it is owed, says so ("WRK drained"), and this
module ends wrk then. Cut off mid-flight, a purchase the server still
completes would be an order with no 202 the benchmark read.

The figures come back in the shape of loadgen.summarize(), so a phase reads
the same whichever generator drove it; wrk's CPU is counted with the
generator's (loadgen.note_child_cpu).
"""
from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks import loadgen

SCRIPT = Path(__file__).resolve().parent / "wrk_request.lua"
# How long a phase may take to drain (or a job list to finish) before wrk's
# own -d ends it anyway, answers still owed.
DRAIN_S = 15


def available() -> bool:
    return shutil.which("wrk") is not None


def uptime() -> float:
    """The clock wrk_request.lua reads (/proc/uptime: it has no other)."""
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


def parse(text: str) -> dict:
    """The done() lines of wrk_request.lua -> a loadgen.summarize()-like dict."""
    head = re.search(r"^WRK requests=(\d+) duration_us=(\d+) p50_us=(\d+) p99_us=(\d+) "
                     r"connect=(\d+) read=(\d+) write=(\d+) timeout=(\d+) status=(\d+)(?: closed=(\d+))?$", text, re.M)
    if not head:
        raise RuntimeError(f"wrk printed no figures: {text[-400:]!r}")
    requests, duration_us, p50, p99, connect, read, write, timeout, _ = map(int, head.groups()[:9])
    closed = int(head.group(10) or 0)
    by_status = {int(c): int(n) for c, n in re.findall(r"^WRK code (\d+) (\d+)$", text, re.M)}
    # wrk counts a failed connection or a timed-out request as an error, not a
    # response: status 0, as the asyncio client reports them. A response whose
    # body ends when the server closes (uWSGI's http-socket) is answered and then
    # counted as a read error too: those reads are not errors.
    errors = connect + write + timeout + max(0, read - closed)
    if errors:
        by_status[0] = by_status.get(0, 0) + errors
    window = duration_us / 1e6
    answered = sum(n for c, n in by_status.items() if c)
    return {"requests": answered + errors, "rps": answered / window if window else 0.0,
            "p50_ms": p50 / 1000, "p99_ms": p99 / 1000, "mean_ms": 0.0, "errors": errors,
            "by_status": dict(sorted(by_status.items())), "window_s": window}


def _wrk(url: str, options: list[str], *, threads: int, concurrency: int, ceiling_s: float,
         timeout_s: float, out: Path) -> str:
    """Run wrk until every thread drained (then SIGINT: wrk's main thread
    sleeps the whole -d, its handler ends the sleep and wrk prints its
    figures) or until -d; wrk's output."""
    args = ["wrk", "-t", str(threads), "-c", str(concurrency), "-d", f"{math.ceil(ceiling_s)}s",
            "--timeout", f"{int(timeout_s)}s", "--latency", "-s", str(SCRIPT), url, "--",
            f"threads={threads}", *options]
    with open(out, "wb") as sink:
        p = subprocess.Popen(args, stdout=sink, stderr=subprocess.STDOUT)
    interrupted = False
    while True:
        # wait4, not Popen.wait: its rusage is wrk's own CPU
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            loadgen.note_child_cpu(usage.ru_utime + usage.ru_stime)
            p.returncode = code = os.waitstatus_to_exitcode(status)
            break
        if not interrupted and out.read_text(errors="replace").count("WRK drained") >= threads:
            os.kill(p.pid, signal.SIGINT)
            interrupted = True
        time.sleep(0.005)
    text = out.read_text(errors="replace")
    if code != 0:
        raise RuntimeError(f"wrk exited {code}: {text[-400:]!r}")
    return text


def run(*, host: str, port: int, path: str, tokens: list[str], key_prefix: str, concurrency: int, seconds: float,
        body: bytes | None = None, bodies: list[bytes] | None = None, threads: int | None = None,
        timeout_s: float = 30, record: bool = False) -> dict:
    """POST `body` (or each of `bodies` in turn: one-line JSON) to
    host:port/path for `seconds` over `concurrency` keep-alive connections,
    then wait for every answer; the figures as loadgen.summarize() gives them,
    and with `record` the order ids of the 202s ("order_ids") and the SKU of
    each ("order_skus": order id -> SKU id, read from the 202's body)."""
    threads = max(1, min(concurrency, threads or os.cpu_count() or 1))
    bodies = bodies if bodies is not None else [body]
    if not bodies or any(b is None or b"\n" in b for b in bodies):
        raise ValueError("give a body, or bodies, each on one line")
    with tempfile.TemporaryDirectory(prefix="bench-wrk-") as tmp:
        tok, payload, out, orders = Path(tmp, "tokens"), Path(tmp, "bodies"), Path(tmp, "out"), Path(tmp, "orders")
        tok.write_text("\n".join(tokens) + "\n")
        payload.write_bytes(b"\n".join(bodies) + b"\n")
        options = [f"tokens={tok}", f"bodies={payload}", f"prefix={key_prefix}",
                   f"stop_at={uptime() + seconds:.2f}"]
        if record:
            options.append(f"orders={orders}")
        text = _wrk(f"http://{host}:{port}{path}", options, threads=threads, concurrency=concurrency,
                    ceiling_s=seconds + DRAIN_S, timeout_s=timeout_s, out=out)
        summary = parse(text)
        if record:
            pairs = [x.split(" ", 1) for x in orders.read_text().split("\n") if x] if orders.exists() else []
            summary["order_ids"] = [p[0] for p in pairs]
            summary["order_skus"] = {p[0]: (p[1] if len(p) > 1 else "?") for p in pairs}
    return summary


def run_jobs(*, host: str, port: int, jobs: list[tuple[str, str, str]], concurrency: int,
             threads: int | None = None, timeout_s: float = 30, ceiling_s: float = 300) -> dict:
    """Send each (method, path, token) of `jobs` once, over `concurrency`
    keep-alive connections, until all are answered; the figures as
    loadgen.summarize() gives them."""
    threads = max(1, min(concurrency, len(jobs), threads or os.cpu_count() or 1))
    with tempfile.TemporaryDirectory(prefix="bench-wrk-") as tmp:
        listing, out = Path(tmp, "jobs"), Path(tmp, "out")
        listing.write_text("".join(f"{m} {p} {t}\n" for m, p, t in jobs))
        text = _wrk(f"http://{host}:{port}/", [f"jobs={listing}"], threads=threads,
                    concurrency=max(threads, concurrency), ceiling_s=ceiling_s, timeout_s=timeout_s, out=out)
    return parse(text)
