"""Group-commit publishing of confirm messages from the web process.

Each accepted reservation must be in RabbitMQ (publisher-confirmed) before the
client hears 202, so that it survives the loss of Redis. Waiting for one
confirm per request costs ~1.5 ms of Celery/AMQP work per click and one task
per reservation in the worker. Instead, request threads hand their reservation
to one publisher thread per process, which sends everything that queued up
while the previous publish was in flight as one signed message and waits for
one confirm; each request waits for its batch (no timer: under light load a
batch is one reservation, under a burst it is dozens).
"""
from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field

from django.conf import settings

logger = logging.getLogger(__name__)


class PublishFailed(Exception):
    pass


@dataclass
class _Ticket:
    payload: dict
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class BatchPublisher:
    def __init__(self, *, max_batch: int = 256) -> None:
        self.max_batch = max_batch
        self._cond = threading.Condition()
        self._pending: list[_Ticket] = []
        self._thread: threading.Thread | None = None
        self._pid = 0

    def publish(self, payload: dict, *, timeout_s: float) -> None:
        """Block until the batch holding `payload` is confirmed by RabbitMQ."""
        ticket = _Ticket(payload)
        with self._cond:
            self._ensure_thread()
            self._pending.append(ticket)
            self._cond.notify()
        if not ticket.done.wait(timeout_s):
            raise PublishFailed("publish not confirmed in time")
        if ticket.error is not None:
            raise PublishFailed(str(ticket.error)) from ticket.error

    def _ensure_thread(self) -> None:
        # A forked child (gunicorn worker) must start its own thread.
        if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
            self._pending = []
            self._pid = os.getpid()
            self._thread = threading.Thread(target=self._run, name="confirm-publisher", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        from seckill_site.celery import app

        conn = None
        while True:
            with self._cond:
                while not self._pending:
                    self._cond.wait()
                batch = self._pending[: self.max_batch]
                del self._pending[: self.max_batch]
            try:
                if conn is None:
                    conn = app.connection_for_write()
                send_confirm_batch([t.payload for t in batch], connection=conn)
                error = None
            except BaseException as exc:  # report to every waiting request
                logger.warning("confirm batch of %d not published: %r", len(batch), exc)
                error = exc
                try:
                    if conn is not None:
                        conn.release()
                except Exception:
                    pass
                conn = None
            for t in batch:
                t.error = error
                t.done.set()


def send_confirm_batch(payloads: list[dict], *, connection=None) -> None:
    from inventory import signing
    from inventory.tasks import confirm_reservation_task

    body = {"reservations": payloads}
    confirm_reservation_task.apply_async(
        args=[body, signing.sign(body)], connection=connection,
        argsrepr=f"<{len(payloads)} reservation(s)>", kwargsrepr="{}",
    )


_publisher = BatchPublisher()


def publish_reservation(payload: dict) -> None:
    if settings.SECKILL_PUBLISH_BATCHING:
        _publisher.publish(payload, timeout_s=settings.SECKILL_PUBLISH_TIMEOUT_SECONDS)
    else:
        send_confirm_batch([payload])
