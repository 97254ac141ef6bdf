"""Celery tasks: thin, signed, idempotent consumers that call inventory services.

The confirm is not here: confirm messages are read in bulk by the confirm
consumer (orders.consumers). Everything these tasks consume is sent by
inventory.messages.
"""
from __future__ import annotations

import logging

from celery import shared_task

from core.retry import until_done
from inventory import redis_store, signing
from inventory.services import gives, stock

logger = logging.getLogger(__name__)


@shared_task(name="inventory.tasks.stock_give_task", acks_late=True, reject_on_worker_lost=True)
def stock_give_task(payload: dict, signature: str) -> str:
    """Apply a give to Redis (MySQL already committed it)."""
    try:
        body = signing.verify(payload, signature)
    except signing.BadSignature as exc:
        logger.error("refused give message: %s", exc)
        gives.dead_letter_record(task_name="stock_give", payload={"args": [payload, signature]},
                                 reason=f"refused: {exc}")
        return "refused"
    try:
        outcome = until_done(lambda: gives.stock_give_apply(
            sku_id=body["sku_id"], op_id=body["op_id"], quantity=int(body["quantity"]),
            user_id=body.get("user_id"), total_delta=int(body.get("total_delta", 0)),
            frozen_delta=int(body.get("frozen_delta", 0))), attempts=8, what="give")
    except gives.GiveDeferred:
        return "deferred"  # left pending: the resend sweep sends it again
    return outcome.name.lower()


@shared_task(name="inventory.tasks.stock_gives_task", acks_late=True, reject_on_worker_lost=True)
def stock_gives_task(body: dict, signature: str) -> dict:
    """Apply a list of gives to Redis (MySQL already committed them)."""
    try:
        gives_list = signing.verify(body, signature)["gives"]
    except (signing.BadSignature, KeyError) as exc:
        logger.error("refused gives message: %s", exc)
        gives.dead_letter_record(task_name="stock_gives", payload={"args": [body, signature]},
                                 reason=f"refused: {exc}")
        return {"refused": 1}
    try:
        return until_done(lambda: gives.stock_gives_apply(gives=gives_list), attempts=8, what="gives")
    except gives.GiveDeferred:
        return {"deferred": 1}  # left pending: the resend sweep sends them again


@shared_task(name="inventory.tasks.outbox_relay_task", expires=60)
def outbox_relay_task() -> dict:
    """Beat: send outbox rows the after-commit relay did not (process died,
    broker down), send again gives that never reached Redis, and resolve
    freezes whose process died halfway."""
    resent = gives.gives_resend_lost()
    sent = gives.outbox_relay(older_than_s=2)
    resolved = stock.stock_freezes_resolve()
    redis_store.sweep_ran(task="inventory.tasks.outbox_relay_task")
    return {"sent": sent, "lost_gives": len(resent), "freezes_resolved": resolved}


@shared_task(name="inventory.tasks.dead_letters_collect_task", expires=60)
def dead_letters_collect_task() -> int:
    """Beat: move messages RabbitMQ dead-lettered (delivery limit, rejected) into
    the DeadLetter table, where ops see them in the admin."""
    moved = gives.dead_letters_collect()
    redis_store.sweep_ran(task="inventory.tasks.dead_letters_collect_task")
    return moved
