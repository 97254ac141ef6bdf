"""Gives for Redis, as Celery task messages (consumed by inventory.tasks), each
body signed with SECKILL_TASK_SIGNING_KEY."""
from __future__ import annotations

from inventory import signing
from inventory.messages.names import GIVES_TASK


def publish_gives(payloads: list[dict]) -> str:
    """Several gives for Redis in one signed Celery task message. Returns the task id."""
    from celery import current_app

    body = {"gives": payloads}
    return current_app.send_task(GIVES_TASK, args=[body, signing.sign(body)]).id
