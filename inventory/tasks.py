"""Celery tasks: thin, signed, idempotent wrappers around inventory services."""
from __future__ import annotations

import logging
import time

from celery import shared_task
from celery_batches import Batches
from django.db import InterfaceError, OperationalError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from inventory import services, signing
from inventory.models import DeadLetter

logger = logging.getLogger(__name__)

TRANSIENT = (OperationalError, InterfaceError, RedisConnectionError, RedisTimeoutError)
CONFIRM_TASK = "inventory.tasks.confirm_reservation_task"


def with_store_retry(fn, *, attempts: int | None = 8):
    """Retry a unit of work while MySQL or Redis is away, with a backoff capped
    at 5 s; `attempts=None` retries until it succeeds."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except TRANSIENT as exc:
            if attempts is not None and attempt >= attempts:
                raise
            logger.warning("store unavailable (%r), retry %d", exc, attempt)
            time.sleep(min(5.0, 0.25 * 2 ** min(attempt, 5)))
            from django.db import close_old_connections

            close_old_connections()


# Messages are buffered by the worker and handled as one list (celery-batches):
# one MySQL transaction per SKU per flush instead of one task run per click.
# Acknowledged after the flush returns (acks_late); a worker that dies before
# leaves them unacknowledged, so RabbitMQ delivers them again.
@shared_task(base=Batches, name=CONFIRM_TASK, flush_every=200, flush_interval=0.25,
             acks_late=True, reject_on_worker_lost=True)
def confirm_reservation_task(requests) -> dict:
    """Each message: args [{"reservations": [{order_id, sku_id, user_id, quantity,
    idempotency_key, reserved_ms}, ...]}, signature]."""
    reservations: list[services.Reservation] = []
    for req in requests:
        try:
            payload, signature = req.args
            body = signing.verify(payload, signature)
            reservations += [services.Reservation.from_payload(p) for p in body["reservations"]]
        except (signing.BadSignature, ValueError, KeyError, TypeError) as exc:
            logger.error("refused confirm message %s: %r", req.id, exc)
            DeadLetter.objects.create(task_name=CONFIRM_TASK, payload={"args": list(req.args or [])},
                                      reason=f"{exc.__class__.__name__}: {exc}"[:255])
    if not reservations:
        return {"confirmed": 0, "failed": 0}
    # celery-batches acknowledges the messages when this returns, even after an
    # error, so it returns only once MySQL has them: a store that is down is
    # waited for, however long (the messages stay unacknowledged meanwhile).
    outcomes = with_store_retry(lambda: services.reservations_confirm(reservations=reservations),
                                attempts=None)
    return {"confirmed": sum(len(o.confirmed) for o in outcomes), "failed": sum(len(o.failed) for o in outcomes)}


def publish_confirm(reservation: services.Reservation) -> None:
    """Publish one reservation's confirm from the purchase path."""
    from inventory.publisher import publish_reservation

    publish_reservation(reservation.payload())


def publish_confirms(reservations: list[services.Reservation]) -> None:
    """Publish several reservations as one message, confirmed (orphan sweep)."""
    from inventory.publisher import send_confirm_batch

    if reservations:
        send_confirm_batch([r.payload() for r in reservations])


@shared_task(name="inventory.tasks.stock_give_task", acks_late=True, reject_on_worker_lost=True)
def stock_give_task(payload: dict, signature: str) -> int:
    """Apply a give to Redis (MySQL already committed it). Body: {sku_id, op_id, quantity, user_id}."""
    body = signing.verify(payload, signature)
    return with_store_retry(lambda: services.stock_give_apply(
        sku_id=body["sku_id"], op_id=body["op_id"], quantity=int(body["quantity"]),
        user_id=body.get("user_id"), total_delta=int(body.get("total_delta", 0)),
        frozen_delta=int(body.get("frozen_delta", 0))))


def publish_give(payload: dict) -> str:
    return stock_give_task.apply_async(args=[payload, signing.sign(payload)]).id


@shared_task(name="inventory.tasks.outbox_relay_task", expires=60)
def outbox_relay_task() -> int:
    """Beat: send outbox rows the after-commit relay did not (process died, broker down)."""
    return services.outbox_relay(older_than_s=2)


@shared_task(name="inventory.tasks.dead_letters_collect_task", expires=60)
def dead_letters_collect_task() -> int:
    """Beat: move messages RabbitMQ dead-lettered (delivery limit, rejected) into
    the DeadLetter table, where ops see them in the admin."""
    return services.dead_letters_collect()
