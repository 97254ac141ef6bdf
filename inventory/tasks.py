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
    """Body: {"reservations": [{order_id, sku_id, user_id, quantity, idempotency_key, reserved_ms}, ...]}."""
    body = signing.verify(payload, signature)
    reservations = [services.Reservation.from_payload(p) for p in body["reservations"]]
    try:
        outcomes = services.reservations_confirm(reservations=reservations)
    except TRANSIENT as exc:
        requeue_later(exc)
    return {"confirmed": sum(len(o.confirmed) for o in outcomes), "failed": sum(len(o.failed) for o in outcomes)}


def publish_confirm(reservation: services.Reservation) -> None:
    """Publish one reservation's confirm (group-committed in the web process)."""
    from inventory.publisher import publish_reservation

    publish_reservation(reservation.payload())


def publish_confirms(reservations: list[services.Reservation]) -> None:
    """Publish several reservations as one message (orphan sweep)."""
    from inventory.publisher import send_confirm_batch

    if reservations:
        send_confirm_batch([r.payload() for r in reservations])
