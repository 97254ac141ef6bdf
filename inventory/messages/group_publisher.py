"""The purchase path's publish: `publish_confirm` hands a reservation to its
partition's group publisher, which sends whatever requests have gathered as
one confirmed message."""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

from django.conf import settings

from inventory.domain import Reservation
from inventory.messages import publisher
from inventory.messages.encoding import confirm_encode
from inventory.messages.queues import partition_of


@dataclass
class _Waiting:
    reservation: Reservation
    deadline: float
    done: threading.Event
    error: BaseException | None = None


class _GroupPublisher:
    """The purchase path's publishes of one process to one partition, sent together.

    A request hands its reservation over and waits. One thread per process and
    partition (its own connection: a slow queue leader holds only its own
    partition's requests) publishes whatever has gathered as one message (up to
    SECKILL_MESSAGE_CHUNK reservations), waits for the broker's confirm, and
    wakes every request of the message; what arrives meanwhile goes in the next
    one. Nothing waits on purpose: under light load a message carries one
    reservation, under a sale's load many, so the broker, the confirm consumer
    and the web spend per message, not per click (docs/benchmark.md,
    "The selling phase"). Each request keeps its own budget: one that gives up waiting
    undoes its own reservation exactly as after a failed publish, and a copy
    of it published after all is refused by the confirm (its decision says
    undone: inventory.services.decisions)."""

    def __init__(self, partition: int = 0) -> None:
        self.partition = partition
        self.lock = threading.Lock()
        self.ready = threading.Condition(self.lock)
        self.waiting: list[_Waiting] = []
        self.pid = 0

    def publish(self, reservation: Reservation, *, deadline: float) -> None:
        entry = _Waiting(reservation, deadline, threading.Event())
        with self.lock:
            self._running()
            self.waiting.append(entry)
            self.ready.notify()
        if not entry.done.wait(max(0.0, deadline - time.monotonic())):
            raise TimeoutError("publish not confirmed within the budget")
        if entry.error is not None:
            raise entry.error

    def _running(self) -> None:
        if self.pid != os.getpid():  # first use in this process (gunicorn forks its workers)
            self.pid = os.getpid()
            self.waiting = []
            name = "confirm-publisher" + (f"-{self.partition}" if self.partition else "")
            threading.Thread(target=self._loop, name=name, daemon=True).start()

    def _loop(self) -> None:
        while True:
            with self.lock:
                while not self.waiting:
                    self.ready.wait()
                chunk = settings.SECKILL_MESSAGE_CHUNK
                batch, self.waiting = self.waiting[:chunk], self.waiting[chunk:]
            now = time.monotonic()
            live = [w for w in batch if w.deadline > now]
            late = [w for w in batch if w.deadline <= now]  # their requests have given up
            try:
                if live:
                    body, headers = confirm_encode([w.reservation for w in live])
                    publisher.send(body, headers, deadline=min(w.deadline for w in live),
                                   confirm=settings.SECKILL_WEB_PUBLISH_CONFIRM, partition=self.partition)
            except BaseException as exc:  # every waiter hears of it
                for w in live:
                    w.error = exc
            for w in late:
                w.error = TimeoutError("publish budget spent before the message left")
            for w in batch:
                w.done.set()


_groups: dict[int, _GroupPublisher] = {}
_groups_lock = threading.Lock()


def _group(partition: int) -> _GroupPublisher:
    group = _groups.get(partition)
    if group is None:
        with _groups_lock:
            group = _groups.setdefault(partition, _GroupPublisher(partition))
    return group


def publish_confirm(reservation: Reservation, *, deadline: float) -> None:
    """The purchase path's publish: the reservation is in a message the broker
    confirmed before `deadline` (time.monotonic) when this returns; raises
    otherwise (then the message may or may not exist)."""
    _group(partition_of(reservation.sku_id)).publish(reservation, deadline=deadline)
