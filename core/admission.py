"""The web process's bounded backlog: how many requests work at once, how many
may wait for them, and the answer to the rest.

Every HTTP server queues what it cannot serve yet (gunicorn up to 2048
connections, granian up to its backpressure), and a queue nobody bounds turns a
flood into minutes of latency for everyone, answered or not. This gate keeps
the queue where the process can see it: `slots` requests run, up to `queue`
more wait (each at most `wait_s`), and any request beyond that is refused at
once with 503 `unavailable` before it touches Redis, MySQL or the broker, so it
took nothing and the client may retry (docs/operations.md, "The web server").

The server must give the process more threads than `slots + queue`, so a
refusal always finds a thread to be written from (seckill_site/webserver.py).
"""
from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager


class Gate:
    """A counting gate with a bounded, time-limited wait."""

    def __init__(self, *, slots: int, queue: int, wait_s: float) -> None:
        if slots < 1 or queue < 0 or wait_s < 0:
            raise ValueError("slots >= 1, queue >= 0, wait_s >= 0")
        self.slots, self.queue, self.wait_s = slots, queue, wait_s
        self._cond = threading.Condition(threading.Lock())
        self._free = slots
        self._waiting = 0
        self.refused = 0  # since start, for the tests and a curious operator

    def enter(self) -> bool:
        """Take a slot (True), or refuse (False): the wait is full, or no slot
        freed within `wait_s`."""
        with self._cond:
            if self._free > 0:
                self._free -= 1
                return True
            if self._waiting >= self.queue:
                self.refused += 1
                return False
            self._waiting += 1
            deadline = time.monotonic() + self.wait_s
            try:
                while self._free <= 0:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        self.refused += 1
                        return False
                    # a slot freed (notify), or the time is up: the loop tells
                    self._cond.wait(remaining)
                self._free -= 1
                return True
            finally:
                self._waiting -= 1

    def leave(self) -> None:
        with self._cond:
            self._free += 1
            if self._waiting:
                self._cond.notify()

    def resume(self) -> None:
        """Take the slot back after `idle()`, at once: the request was admitted
        already, so for a moment the slots may be over-full rather than make it
        queue behind requests that came after it."""
        with self._cond:
            self._free -= 1

    @property
    def busy(self) -> int:
        return self.slots - self._free

    @property
    def waiting(self) -> int:
        return self._waiting


_held = threading.local()  # .gate: the gate whose slot this thread's request holds


def held(gate: Gate | None) -> None:
    """Record (or clear, with None) the gate whose slot the current thread holds."""
    _held.gate = gate


@contextmanager
def idle():
    """A stretch in which the request waits on purpose and uses no CPU (a
    duplicate click waiting for the first click's decision): its slot serves
    another request meanwhile. Outside a gated request it does nothing."""
    gate = getattr(_held, "gate", None)
    if gate is None:
        yield
        return
    gate.leave()
    try:
        yield
    finally:
        gate.resume()


# The contract's 503 body (`unavailable`: nothing was taken;
# (docs/contract.md, "Rules a client can rely on")), built once: a refusal must
# cost next to nothing, or the flood it sheds would still eat the process.
REFUSAL_STATUS = "503 Service Unavailable"
REFUSAL_BODY = json.dumps({"code": "unavailable",
                           "detail": "The server is at capacity; nothing was taken. Retry shortly."},
                          separators=(",", ":")).encode()
REFUSAL_HEADERS = [("Content-Type", "application/json"), ("Content-Length", str(len(REFUSAL_BODY))),
                   ("Retry-After", "1")]


def refuse(start_response) -> list[bytes]:
    """Answer a WSGI request with the contract's 503, without Django."""
    start_response(REFUSAL_STATUS, list(REFUSAL_HEADERS))
    return [REFUSAL_BODY]
