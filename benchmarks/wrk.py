"""wrk (the Debian package) as the benchmark's load generator for the phases
that need no response body: one C process on an event loop per thread costs the
server's two cores far less than the Python client. benchmarks/wrk_request.lua
varies the token and the Idempotency-Key per request and counts every status.

The figures come back in the shape of loadgen.summarize(), so a phase reads
the same whichever generator drove it; wrk's CPU is counted with the
generator's (loadgen.note_child_cpu).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from benchmarks import loadgen

SCRIPT = Path(__file__).resolve().parent / "wrk_request.lua"


def available() -> bool:
    return shutil.which("wrk") is not None


def parse(text: str) -> dict:
    """The done() lines of wrk_request.lua -> a loadgen.summarize()-like dict."""
    head = re.search(r"^WRK requests=(\d+) duration_us=(\d+) p50_us=(\d+) p99_us=(\d+) "
                     r"connect=(\d+) read=(\d+) write=(\d+) timeout=(\d+) status=(\d+)$", text, re.M)
    if not head:
        raise RuntimeError(f"wrk printed no figures: {text[-400:]!r}")
    requests, duration_us, p50, p99, connect, read, write, timeout, _ = map(int, head.groups())
    by_status = {int(c): int(n) for c, n in re.findall(r"^WRK code (\d+) (\d+)$", text, re.M)}
    # wrk counts a failed connection or a timed-out request as an error, not a
    # response: status 0, as the asyncio client reports them
    errors = connect + read + write + timeout
    if errors:
        by_status[0] = by_status.get(0, 0) + errors
    window = duration_us / 1e6
    answered = sum(n for c, n in by_status.items() if c)
    return {"requests": answered + errors, "rps": answered / window if window else 0.0,
            "p50_ms": p50 / 1000, "p99_ms": p99 / 1000, "mean_ms": 0.0, "errors": errors,
            "by_status": dict(sorted(by_status.items())), "window_s": window}


def run(*, host: str, port: int, path: str, tokens: list[str], body: bytes, key_prefix: str,
        concurrency: int, seconds: float, threads: int | None = None, timeout_s: float = 30) -> dict:
    """POST `body` to host:port/path for `seconds` over `concurrency` keep-alive
    connections; the figures as loadgen.summarize() gives them."""
    threads = max(1, min(concurrency, threads or os.cpu_count() or 1))
    with tempfile.TemporaryDirectory(prefix="bench-wrk-") as tmp:
        tok, payload, out = Path(tmp, "tokens"), Path(tmp, "body"), Path(tmp, "out")
        tok.write_text("\n".join(tokens) + "\n")
        payload.write_bytes(body)
        # whole seconds: wrk's -d takes no fractions
        args = ["wrk", "-t", str(threads), "-c", str(concurrency), "-d", f"{max(1, round(seconds))}s",
                "--timeout", f"{int(timeout_s)}s", "--latency", "-s", str(SCRIPT),
                f"http://{host}:{port}{path}", "--", str(tok), str(payload), key_prefix]
        with open(out, "wb") as sink:
            p = subprocess.Popen(args, stdout=sink, stderr=subprocess.STDOUT)
        # wait4, not Popen.wait: its rusage is wrk's own CPU
        code = loadgen.reap(p.pid)
        p.returncode = code
        text = out.read_text(errors="replace")
    if code != 0:
        raise RuntimeError(f"wrk exited {code}: {text[-400:]!r}")
    return parse(text)
