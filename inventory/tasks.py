"""Celery tasks: thin, signed, idempotent consumers that call inventory services.

The confirm is not here: confirm messages are read in bulk by the confirm
consumer (orders.consumers). Everything these tasks consume is sent by
inventory.messages (the gives: inventory.messages.celery_sends).
"""
from __future__ import annotations

import logging

from celery import shared_task

from core.retry import until_done
from inventory import signing
from inventory.messages.names import GIVE_TASK, GIVES_TASK
from inventory.services import dead_letters, gives, stock
from inventory.sweeps import sweep_task

logger = logging.getLogger(__name__)


@shared_task(name=GIVES_TASK, acks_late=True, reject_on_worker_lost=True)
def stock_gives_task(body: dict, signature: str) -> dict:
    """Apply a list of gives to Redis (MySQL already committed them)."""
    try:
        gives_list = signing.verify(body, signature)["gives"]
    except (signing.BadSignature, KeyError) as exc:
        logger.error("refused gives message: %s", exc)
        dead_letters.dead_letter_record(task_name=GIVES_TASK, payload={"args": [body, signature]},
                                        reason=f"refused: {exc}")
        return {"refused": 1}
    return _gives_apply(gives_list)


@shared_task(name=GIVE_TASK, acks_late=True, reject_on_worker_lost=True)
def stock_give_task(payload: dict, signature: str) -> str:
    """Old messages only: nothing sends one give per message, but a task queue
    kept across an upgrade from an older release may hold some, and without a
    consumer they would wait in the dead letters for ops. Each is applied as a
    batch of one; returns that give's outcome."""
    try:
        give = signing.verify(payload, signature)
    except signing.BadSignature as exc:
        logger.error("refused give message: %s", exc)
        dead_letters.dead_letter_record(task_name=GIVE_TASK, payload={"args": [payload, signature]},
                                        reason=f"refused: {exc}")
        return "refused"
    return next(outcome for outcome, n in _gives_apply([give]).items() if n)


def _gives_apply(gives_list: list[dict]) -> dict[str, int]:
    """Counts by outcome, transient store errors waited out; a give whose SKU
    Redis has no snapshot of is left pending, and the resend sweep sends it again."""
    try:
        return until_done(lambda: gives.stock_gives_apply(gives=gives_list), attempts=8, what="gives")
    except gives.GiveDeferred:
        return {"deferred": 1}


# Names of the sweeps beat sends (reconciliation.schedule stores them in its rows).
OUTBOX_RELAY_TASK = "inventory.tasks.outbox_relay_task"
FREEZES_RESOLVE_TASK = "inventory.tasks.stock_freezes_resolve_task"
DEAD_LETTERS_COLLECT_TASK = "inventory.tasks.dead_letters_collect_task"


@sweep_task(OUTBOX_RELAY_TASK, expires=60)
def outbox_relay_task() -> dict:
    """Beat: send outbox rows the after-commit relay did not (process died,
    broker down), and send again gives that never reached Redis."""
    resent = gives.gives_resend_lost()
    return {"sent": gives.outbox_relay(older_than_s=2), "lost_gives": len(resent)}


@sweep_task(FREEZES_RESOLVE_TASK, expires=60)
def stock_freezes_resolve_task() -> int:
    """Beat: cancel freezes whose process died between their intent and their
    MySQL move (inventory.services.stock.stock_freezes_resolve)."""
    return stock.stock_freezes_resolve()


@sweep_task(DEAD_LETTERS_COLLECT_TASK, expires=60)
def dead_letters_collect_task() -> int:
    """Beat: move messages RabbitMQ dead-lettered (delivery limit, rejected) into
    the DeadLetter table, where ops see them in the admin."""
    return dead_letters.dead_letters_collect()
