"""Buyers who pay or cancel while the sale and its faults go on: the part of
the API that needs the database on every request (a click needs Redis and the
broker only). Four threads take the sale's confirmed orders (PENDING_PAYMENT,
read from MySQL as they come) and POST pay (four in five) or cancel with the
owner's token, paced; a pay answered 503 is sent again later, as a client told
`unavailable` would. Every answer is kept with the moments it was sent and
answered (time.time(), the clock of the faults' moments), so the run's row
counts the pays and cancels answered 200 and 503 and the pay pause: from a
fault to the first one answered 200 that was sent after it."""
from __future__ import annotations

import contextlib
import http.client
import random
import threading
import time
from dataclasses import dataclass, field

from benchmarks.harness import HOST

THREADS = 4
GAP_S = 0.2          # between one thread's requests: about 20 a second in all
REFILL_S = 0.3       # the confirmed orders read again at most this often
TIMEOUT_S = 30.0     # a request's answer waited for (the app waits out a database away for up to 10 s)
AFTER_S = 30.0       # after the load, until a pay sent after the last fault answered 200, at most


@dataclass
class Answer:
    sent: float
    answered: float
    status: int
    kind: str  # pay | cancel


@dataclass
class Payer:
    """The payers of one run (start, then finish once the load is over)."""

    port: int
    skus: list[str]
    token_of: dict[int, str]  # user id -> token
    answers: list[Answer] = field(default_factory=list)
    _waiting: list[tuple[str, int]] = field(default_factory=list)  # (order id, user id) to pay or cancel
    _tried: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _refilled: float = 0.0

    def start(self) -> None:
        self._threads = [threading.Thread(target=self._work, args=(random.Random(i),), daemon=True)
                         for i in range(THREADS)]
        for t in self._threads:
            t.start()

    def finish(self, after: float | None) -> None:
        """Until a pay or cancel sent after `after` (the last fault, time.time())
        answered 200, AFTER_S at most; then stop."""
        deadline = time.monotonic() + AFTER_S
        while after is not None and time.monotonic() < deadline and not any(
                a.status == 200 and a.sent > after for a in list(self.answers)):
            time.sleep(0.1)
        self._stop.set()
        for t in self._threads:
            t.join(timeout=TIMEOUT_S + 5)

    def _refill(self) -> None:
        """The sale's confirmed orders not tried yet (none while the database is away)."""
        from django.db import connection

        from orders.models import Order

        if time.monotonic() - self._refilled < REFILL_S:
            return
        self._refilled = time.monotonic()
        try:
            rows = list(Order.objects.filter(sku_id__in=self.skus, status="PENDING_PAYMENT")
                        .exclude(order_id__in=self._tried).values_list("order_id", "user_id")[:100])
        except Exception:  # the database away: the next refill tries again
            with contextlib.suppress(Exception):
                connection.close()
            return
        self._tried.update(oid for oid, _ in rows)
        self._waiting.extend(rows)

    def _next(self) -> tuple[str, int] | None:
        with self._lock:
            if not self._waiting:
                self._refill()
            return self._waiting.pop(0) if self._waiting else None

    def _work(self, rnd: random.Random) -> None:
        from django.db import connection

        conn: http.client.HTTPConnection | None = None
        try:
            while not self._stop.is_set():
                job = self._next()
                if job is None:
                    time.sleep(GAP_S)
                    continue
                order_id, user_id = job
                kind = "pay" if rnd.random() < 0.8 else "cancel"
                sent = time.time()
                try:
                    if conn is None:
                        conn = http.client.HTTPConnection(HOST, self.port, timeout=TIMEOUT_S)
                    conn.request("POST", f"/api/v1/orders/{order_id}/{kind}", b"",
                                 {"Authorization": f"Token {self.token_of[user_id]}"})
                    resp = conn.getresponse()
                    resp.read()
                    status = resp.status
                except (OSError, http.client.HTTPException):
                    conn, status = None, 0  # no answer (a web instance killed under it): sent again later
                self.answers.append(Answer(sent, time.time(), status, kind))
                if status in (0, 502, 503, 504):
                    with self._lock:
                        self._waiting.append(job)
                time.sleep(GAP_S)
        finally:
            if conn is not None:
                conn.close()
            connection.close()

    # --- the row's figures ---------------------------------------------------------------------

    def count(self, status: int) -> int:
        return sum(1 for a in self.answers if a.status == status)

    def pause_after(self, moments: list[float]) -> float | None:
        """The longest, over the faults' moments, from a moment to the first
        pay or cancel answered 200 that was sent after it; None when none was."""
        pauses = []
        for moment in moments:
            done = [a.answered for a in self.answers if a.status == 200 and a.sent > moment]
            if done:
                pauses.append(min(done) - moment)
        return max(pauses) if pauses else None
