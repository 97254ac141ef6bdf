"""Celery tasks: thin, signed, idempotent wrappers around inventory services."""
from __future__ import annotations

import logging
import time

from celery import shared_task
from celery.exceptions import Reject
from django.db import InterfaceError, OperationalError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from inventory import services, signing

logger = logging.getLogger(__name__)

TRANSIENT = (OperationalError, InterfaceError, RedisConnectionError, RedisTimeoutError)


def requeue_later(exc: Exception, *, pause_s: float = 1.0) -> None:
    """Hand a message back to RabbitMQ after a store failed.

    The quorum queue counts the delivery; past the delivery limit the message is
    dead-lettered, and the orphan sweep re-publishes it from the in-flight
    record in Redis once the store is back.
    """
    logger.warning("transient failure, message requeued: %r", exc)
    time.sleep(pause_s)
    raise Reject(str(exc), requeue=True)


@shared_task(name="inventory.tasks.confirm_reservation_task", acks_late=True, reject_on_worker_lost=True)
def confirm_reservation_task(payload: dict, signature: str) -> dict:
    reservation = services.Reservation.from_payload(signing.verify(payload, signature))
    try:
        outcome = services.reservation_confirm(reservation=reservation)
    except TRANSIENT as exc:
        requeue_later(exc)
    return {"state": outcome.state, "confirmed": len(outcome.confirmed), "failed": len(outcome.failed)}


def publish_confirm(reservation: services.Reservation) -> None:
    """Send the signed confirm message (persistent, durable queue)."""
    payload = reservation.payload()
    confirm_reservation_task.apply_async(args=[payload, signing.sign(payload)])
