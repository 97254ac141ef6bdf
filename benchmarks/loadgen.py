"""Small, low-overhead HTTP/1.1 load generator for local benchmarks.

Everything runs on a single asyncio event loop with one persistent
(keep-alive) connection per concurrent worker.  The HTTP client is written
by hand on top of asyncio streams so that the per-request CPU cost stays
small: the benchmark machine has only two cores and the server under test
needs most of them.

Only loopback targets are accepted (127.0.0.0/8, ::1 or "localhost").

Typical use::

    from benchmarks.loadgen import run, summarize, format_summary

    def make_request(i):
        return ("POST", "/api/orders/", {"Content-Type": "application/json"},
                b'{"sku": 1}')

    results = run(host="127.0.0.1", port=8000, concurrency=32,
                  make_request=make_request, total_requests=2000)
    print(format_summary("orders", summarize(results)))
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import math
import os
import pickle
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Result", "run_load", "run", "run_procs", "summarize", "format_summary"]

# How much of each response body is kept in memory.
BODY_KEEP = 512

# Reconnect delays after a transport error (seconds): start, growth cap.
_BACKOFF_FIRST = 0.05
_BACKOFF_MAX = 0.5

# Errors that mean "the connection is unusable"; they produce status 0.
_TRANSPORT_ERRORS = (
    OSError,                      # refused, reset, broken pipe, unreachable ...
    EOFError,                     # asyncio.IncompleteReadError is a subclass
    asyncio.LimitOverrunError,    # absurdly long header line
    TimeoutError,                 # asyncio.timeout() expiry
    ValueError,                   # malformed status line / lengths
)

MakeRequest = Callable[[int], "tuple[str, str, dict[str, str], bytes]"]


@dataclass(slots=True)
class Result:
    started: float      # perf_counter() right after the request bytes were handed to the socket
    finished: float     # perf_counter() once the complete response body was read
    status: int         # HTTP status code, 0 on a transport error
    body: bytes         # first BODY_KEEP bytes of the response body
    index: int = -1     # the i that was passed to make_request for this request


class _Stale(Exception):
    """A reused connection died before sending a single response byte."""


# --------------------------------------------------------------------------
# Request encoding / response parsing
# --------------------------------------------------------------------------

def _host_header(host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


def _check_loopback(host: str) -> None:
    if host == "localhost":
        return
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"loadgen only talks to loopback; got host {host!r}") from None
    if not addr.is_loopback:
        raise ValueError(f"loadgen only talks to loopback; got host {host!r}")


_OWN_HEADERS = frozenset({"host", "content-length", "connection", "transfer-encoding"})


def _encode_request(method: str, path: str, headers: dict[str, str],
                    body: bytes | str | None, host_value: str) -> bytes:
    if body is None:
        body = b""
    elif isinstance(body, str):
        body = body.encode("utf-8")
    parts = [f"{method} {path} HTTP/1.1\r\nHost: {host_value}\r\n"]
    for name, value in headers.items():
        if name.lower() in _OWN_HEADERS:
            continue  # we set these ourselves
        parts.append(f"{name}: {value}\r\n")
    if body or method not in ("GET", "HEAD", "DELETE", "OPTIONS"):
        parts.append(f"Content-Length: {len(body)}\r\n")
    parts.append("Connection: keep-alive\r\n\r\n")
    head = "".join(parts).encode("latin-1")
    return head + body if body else head


def _header_value(low_block: bytes, name: bytes) -> bytes | None:
    """Value of header `name` (given as b"\r\nname:") in a lower-cased head block."""
    i = low_block.find(name)
    if i < 0:
        return None
    i += len(name)
    return low_block[i:low_block.find(b"\r\n", i)].strip()


def _parse_head(block: bytes) -> tuple[int, bool, int | None, bool]:
    """Return (status, keep_alive, content_length or None, chunked).

    `block` is the status line plus header lines, ending with an empty line.
    Only the three framing-related headers are looked at; header names are
    matched case-insensitively by lower-casing the whole block once.
    """
    # "HTTP/1.x NNN reason"
    if not block.startswith(b"HTTP/1.") or block[8:9] != b" ":
        raise ValueError(f"bad status line {block[:80]!r}")
    status = int(block[9:12])
    low = block.lower()
    raw_len = _header_value(low, b"\r\ncontent-length:")
    length = int(raw_len) if raw_len is not None else None
    if length is not None and length < 0:
        raise ValueError("negative Content-Length")
    te = _header_value(low, b"\r\ntransfer-encoding:")
    chunked = te is not None and b"chunked" in te
    conn = _header_value(low, b"\r\nconnection:") or b""
    # HTTP/1.1 is persistent unless told otherwise, HTTP/1.0 closes unless told otherwise
    keep_alive = b"close" not in conn if block[7:8] != b"0" else b"keep-alive" in conn
    return status, keep_alive, length, chunked


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    kept = bytearray()
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            # Optional trailer fields, terminated by an empty line.
            while await reader.readuntil(b"\r\n") != b"\r\n":
                pass
            return bytes(kept)
        data = await reader.readexactly(size)
        if len(kept) < BODY_KEEP:
            kept += data[:BODY_KEEP - len(kept)]
        if await reader.readexactly(2) != b"\r\n":
            raise ValueError("malformed chunk terminator")


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    payload: bytes, is_head: bool, reused: bool,
                    ) -> tuple[float, int, bytes, bool]:
    """Send one request, read one response.

    Returns (started, status, body, keep_alive).  Raises _Stale when a reused
    connection turned out to be closed before any response byte arrived.
    """
    writer.write(payload)
    started = time.perf_counter()
    try:
        if writer.transport.get_write_buffer_size():
            await writer.drain()   # only when the kernel did not take it all at once
        while True:
            block = await reader.readuntil(b"\r\n\r\n")
            status, keep_alive, length, chunked = _parse_head(block)
            if 100 <= status < 200 and status != 101:
                continue  # interim response (e.g. 100 Continue): wait for the real one
            break
    except asyncio.IncompleteReadError as exc:
        if reused and not exc.partial:
            raise _Stale() from exc
        raise
    except (ConnectionResetError, BrokenPipeError) as exc:
        if reused:
            raise _Stale() from exc
        raise

    if is_head or status in (204, 304):
        body = b""
    elif chunked:
        body = await _read_chunked(reader)
    elif length is not None:
        body = await reader.readexactly(length) if length else b""
        if length > BODY_KEEP:
            body = body[:BODY_KEEP]
    else:
        # No framing information: the body runs until the server closes.
        body = (await reader.read())[:BODY_KEEP]
        keep_alive = False
    return started, status, body, keep_alive


# --------------------------------------------------------------------------
# Load driver
# --------------------------------------------------------------------------

class _Plan:
    """Hands out request numbers and decides when to stop issuing them."""

    __slots__ = ("next_i", "total", "deadline", "stopped")

    def __init__(self, total: int | None, deadline: float | None) -> None:
        self.next_i = 0
        self.total = total
        self.deadline = deadline
        self.stopped = False

    def claim(self) -> int | None:
        if self.stopped:
            return None
        if self.total is not None and self.next_i >= self.total:
            return None
        if self.deadline is not None and time.perf_counter() >= self.deadline:
            return None
        i = self.next_i
        self.next_i = i + 1
        return i


class _Slot:
    """One worker's connection plus the bookkeeping the watchdog needs."""

    __slots__ = ("reader", "writer", "used", "due", "expired")

    def __init__(self) -> None:
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.used = 0          # responses read on the current connection
        self.due = 0.0         # perf_counter() deadline of the running exchange, 0 = idle
        self.expired = False   # set by the watchdog when it killed the connection

    def usable(self) -> bool:
        return (self.writer is not None and not self.reader.at_eof()
                and not self.writer.transport.is_closing())

    def drop(self, abort: bool) -> None:
        writer = self.writer
        self.reader = self.writer = None
        if writer is None:
            return
        try:
            if abort:
                writer.transport.abort()
            else:
                writer.close()
        except Exception:
            pass


async def _watchdog(slots: list[_Slot], period: float) -> None:
    """Abort connections whose exchange overran its deadline.

    One periodic sweep is far cheaper than arming a timer for every request;
    the price is that timeouts fire up to `period` seconds late.
    """
    while True:
        await asyncio.sleep(period)
        now = time.perf_counter()
        for slot in slots:
            if slot.due and now >= slot.due and slot.writer is not None:
                slot.due = 0.0
                slot.expired = True
                slot.writer.transport.abort()   # the pending read fails at once


async def _send(slot: _Slot, payload: bytes, is_head: bool, host: str, port: int, timeout_s: float,
                retry_stale: bool) -> tuple[float, int, bytes]:
    """One request on the slot's connection (opened first when it has none, or
    the server closed the kept-alive one); (started, status, body), status 0 on
    a transport error. A reused connection found closed before any response
    byte gets the identical request once more on a fresh one."""
    retries_left = 1 if retry_stale else 0
    while True:
        started = time.perf_counter()
        slot.due = started + timeout_s
        slot.expired = False
        try:
            if not slot.usable():
                slot.drop(abort=True)
                async with asyncio.timeout(timeout_s):
                    slot.reader, slot.writer = await asyncio.open_connection(host, port)
                slot.used = 0
            started, status, resp_body, keep_alive = await _exchange(
                slot.reader, slot.writer, payload, is_head, slot.used > 0)
        except _Stale:
            slot.drop(abort=True)
            if retries_left and not slot.expired:
                retries_left -= 1
                continue
            return started, 0, b""
        except _TRANSPORT_ERRORS:
            slot.drop(abort=True)
            return started, 0, b""
        slot.used += 1
        if not keep_alive or slot.expired:
            slot.drop(abort=slot.expired)
        return started, status, resp_body


async def _worker(slot: _Slot, plan: _Plan, results: list[Result], host: str, port: int,
                  make_request: MakeRequest, stop_when: Callable[[Result], bool] | None,
                  timeout_s: float, host_value: str, retry_stale: bool, gap_s: float) -> None:
    backoff = 0.0
    try:
        while True:
            i = plan.claim()
            if i is None:
                return
            method, path, headers, body = make_request(i)
            payload = _encode_request(method, path, headers, body, host_value)
            started, status, resp_body = await _send(slot, payload, method.upper() == "HEAD", host, port,
                                                     timeout_s, retry_stale)
            slot.due = 0.0
            res = Result(started, time.perf_counter(), status, resp_body, i)
            results.append(res)
            if stop_when is not None and not plan.stopped and stop_when(res):
                plan.stopped = True
            if status:
                backoff = 0.0
                delay = gap_s
            else:
                # Pause before reconnecting so a dead server does not make
                # the workers spin.
                backoff = min(_BACKOFF_MAX, backoff * 2) if backoff else _BACKOFF_FIRST
                delay = max(backoff, gap_s)
            if delay and plan.deadline is not None:
                delay = min(delay, plan.deadline - time.perf_counter())
            if not plan.stopped and delay > 0:
                await asyncio.sleep(delay)
    finally:
        slot.due = 0.0
        slot.drop(abort=False)


async def run_load(*, host: str, port: int, concurrency: int,
                   make_request: MakeRequest,
                   total_requests: int | None = None,
                   duration_s: float | None = None,
                   stop_when: Callable[[Result], bool] | None = None,
                   timeout_s: float = 10.0,
                   retry_stale: bool = True,
                   gap_s: float = 0.0) -> list[Result]:
    """Drive `concurrency` keep-alive connections against host:port.

    Requests are numbered from 0; make_request(i) is called exactly once per
    number and returns (method, path, headers, body).  Host, Content-Length
    and Connection headers are added here.  New requests stop being issued
    once total_requests have been issued, duration_s has elapsed, or
    stop_when(result) has returned True; requests already in flight are
    allowed to finish and are included in the returned list (in completion
    order).

    timeout_s bounds connect + send + full response of each request (checked
    by a periodic sweep, so it may fire up to ~0.1 s late); an expired
    request gives status 0.

    retry_stale: when a reused keep-alive connection is found closed before
    the server sent any byte of the response, the identical request (same
    bytes) is sent once more on a fresh connection instead of being counted
    as an error.  This mirrors what ordinary HTTP clients do.

    gap_s: each connection waits this long after every response before it
    issues its next request (a paced client; 0, the default, never waits).
    """
    host = host.strip("[]")       # accept "[::1]" as well as "::1"
    _check_loopback(host)
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    if total_requests is None and duration_s is None and stop_when is None:
        raise ValueError("give total_requests, duration_s or stop_when")
    if total_requests is not None and total_requests < 0:
        raise ValueError("total_requests must be >= 0")
    if timeout_s <= 0:
        raise ValueError("timeout_s must be > 0")

    deadline = time.perf_counter() + duration_s if duration_s is not None else None
    plan = _Plan(total_requests, deadline)
    results: list[Result] = []
    host_value = _host_header(host, port)
    slots = [_Slot() for _ in range(concurrency)]
    guard = asyncio.create_task(_watchdog(slots, min(0.1, timeout_s / 4)))
    try:
        async with asyncio.TaskGroup() as group:
            for slot in slots:
                group.create_task(_worker(slot, plan, results, host, port, make_request,
                                          stop_when, timeout_s, host_value, retry_stale, gap_s))
    finally:
        guard.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await guard
    return results


def run(**kwargs) -> list[Result]:
    """Blocking wrapper around run_load (takes the same keyword arguments)."""
    return asyncio.run(run_load(**kwargs))


# --------------------------------------------------------------------------
# Several processes, and the CPU the generator's own processes used
# --------------------------------------------------------------------------

# CPU seconds of the generator processes this process ran and reaped (the
# forked clients below, wrk): the benchmark adds them to its own process time.
_CHILD_CPU = [0.0]


def child_cpu_seconds() -> float:
    return _CHILD_CPU[0]


def note_child_cpu(seconds: float) -> None:
    _CHILD_CPU[0] += seconds


def reap(pid: int) -> int:
    """Wait for a generator process; count its CPU; return its exit code."""
    _, status, usage = os.wait4(pid, 0)
    note_child_cpu(usage.ru_utime + usage.ru_stime)
    return os.waitstatus_to_exitcode(status)


def run_procs(*, processes: int, concurrency: int, make_request: MakeRequest,
              total_requests: int | None = None, shared: dict | None = None, **kwargs) -> list[Result]:
    """run() spread over `processes` forked processes (one event loop each is
    bound to one core; the two cores of the machine need two to drive a fast
    server). Process j issues the numbers j, j + processes, ..., so
    make_request sees every number once, as with run(); the results carry those
    numbers. `shared`, a dict make_request fills (the token each number used),
    is filled in the children: their copies are merged back into it."""
    if processes <= 1:
        return run(concurrency=concurrency, make_request=make_request, total_requests=total_requests, **kwargs)
    kids = []
    for j in range(processes):
        share = concurrency // processes + (1 if j < concurrency % processes else 0)
        total = None if total_requests is None else len(range(j, total_requests, processes))
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: load, send its results, leave without the parent's exit handlers
            code = 1
            try:
                os.close(read_fd)
                res = run(concurrency=max(1, share), total_requests=total,
                          make_request=lambda i, j=j: make_request(i * processes + j), **kwargs)
                for r in res:
                    r.index = r.index * processes + j
                with os.fdopen(write_fd, "wb") as out:
                    pickle.dump((res, shared), out, protocol=pickle.HIGHEST_PROTOCOL)
                code = 0
            except BaseException:
                traceback.print_exc()
                sys.stderr.flush()
            finally:
                os._exit(code)
        os.close(write_fd)
        kids.append((pid, read_fd))
    results: list[Result] = []
    for pid, read_fd in kids:
        with os.fdopen(read_fd, "rb") as inp:
            data = inp.read()
        if reap(pid) != 0 or not data:
            raise RuntimeError("a load generator process failed")
        res, theirs = pickle.loads(data)
        results.extend(res)
        if shared is not None:
            shared.update(theirs)
    results.sort(key=lambda r: r.finished)
    return results


# --------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------

def _nearest_rank(sorted_values: list[float], pct: float) -> float:
    n = len(sorted_values)
    rank = max(1, math.ceil(pct / 100.0 * n))
    return sorted_values[min(rank, n) - 1]


def summarize(results: list[Result], t0: float | None = None,
              t1: float | None = None) -> dict:
    """Aggregate the results whose `finished` lies in [t0, t1].

    The rate window is t1 - t0 when both bounds are given, otherwise it runs
    from the earliest `started` to the latest `finished` of the selection.
    """
    chosen = [r for r in results
              if (t0 is None or r.finished >= t0) and (t1 is None or r.finished <= t1)]
    by_status: dict[int, int] = {}
    for r in chosen:
        by_status[r.status] = by_status.get(r.status, 0) + 1
    n = len(chosen)
    if n == 0:
        window = (t1 - t0) if (t0 is not None and t1 is not None) else 0.0
        return {"requests": 0, "rps": 0.0, "p50_ms": 0.0, "p99_ms": 0.0,
                "mean_ms": 0.0, "errors": 0, "by_status": {}, "window_s": window}
    if t0 is not None and t1 is not None:
        window = t1 - t0
    else:
        window = max(r.finished for r in chosen) - min(r.started for r in chosen)
    latencies = sorted(r.finished - r.started for r in chosen)
    return {
        "requests": n,
        "rps": n / window if window > 0 else 0.0,
        "p50_ms": _nearest_rank(latencies, 50) * 1000.0,
        "p99_ms": _nearest_rank(latencies, 99) * 1000.0,
        "mean_ms": sum(latencies) / n * 1000.0,
        "errors": by_status.get(0, 0),
        "by_status": dict(sorted(by_status.items())),
        "window_s": window,
    }


def format_summary(name: str, s: dict) -> str:
    """One line, e.g. 'x: 1234 req in 2.50 s = 493.6 req/s, p50 4.1 ms, ...'."""
    n = s.get("requests", 0)
    rps = s.get("rps", 0.0)
    window = s.get("window_s")
    if window is None:
        window = n / rps if rps else 0.0
    statuses = dict(sorted(s.get("by_status", {}).items()))
    return (f"{name}: {n} req in {window:.2f} s = {rps:.1f} req/s, "
            f"p50 {s.get('p50_ms', 0.0):.1f} ms, p99 {s.get('p99_ms', 0.0):.1f} ms, "
            f"statuses {statuses}")
