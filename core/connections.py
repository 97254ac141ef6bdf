"""The web process's MySQL connections, lent to requests instead of kept by threads.

Django keeps one persistent connection per thread (CONN_MAX_AGE). The web
server gives each process more threads than requests it lets run
(core.admission: the waiting and the refused need threads too), so per-thread
connections would grow to one per thread that ever served a payment: 100 per
process by default, and a few web tiers together past MariaDB's max_connections. Lent per request instead, a process
holds about as many connections as it runs requests at once, each still
persistent and reused (docs/operations.md, "The web server").

A connection moves between threads only between requests, never during one,
and one thread at a time: Django's thread-sharing switch allows exactly that.
"""
from __future__ import annotations

import contextlib
import threading

from django.db import connections

ALIAS = "default"


class Lender:
    """Connections of one alias for the requests of one process: at most
    `keep` wait idle for the next request; more are opened while more
    requests need one at once, and closed as they come back."""

    def __init__(self, *, keep: int, alias: str = ALIAS) -> None:
        self.keep, self.alias = keep, alias
        self._lock = threading.Lock()
        self._idle: list = []
        self.opened = 0  # wrappers made, for the tests and a curious operator

    def lend(self) -> tuple:
        """Make a connection this thread's `connections[alias]` for one
        request; returns what `take_back` needs."""
        # a connection the thread already had (a test calling the application
        # inside its own transaction) is put back afterwards, untouched
        before = next((c for c in connections.all(initialized_only=True) if c.alias == self.alias), None)
        with self._lock:
            wrapper = self._idle.pop() if self._idle else None
        if wrapper is None:
            wrapper = connections.create_connection(self.alias)
            wrapper.inc_thread_sharing()  # it will serve other threads' requests after this one's
            self.opened += 1
        connections[self.alias] = wrapper
        return wrapper, before

    def take_back(self, lent: tuple) -> None:
        """The request is over: the thread names the connection it had before,
        or none (one it opens outside a request is its own, as Django gives it)."""
        wrapper, before = lent
        if before is not None:
            connections[self.alias] = before
        else:
            with contextlib.suppress(AttributeError):
                del connections[self.alias]
        with self._lock:
            if len(self._idle) < self.keep:
                self._idle.append(wrapper)
                return
        wrapper.close()

    @property
    def idle(self) -> int:
        return len(self._idle)
