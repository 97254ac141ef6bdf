"""Publishing confirm messages: lean, per thread, with or without publisher confirms.

Celery's own `apply_async` costs ~1.5 ms of CPU per call on this machine
(routing, option merging, argument reprs, retry wrappers); the purchase path
cannot afford it. This builds the same task message (Celery task protocol 2)
and publishes it with a kombu producer kept per thread, so the worker consumes
it as an ordinary `confirm_reservation_task`.

The purchase path waits for the publisher confirm like every other publisher
(SECKILL_WEB_PUBLISH_CONFIRM=1, the default): the benchmark found no throughput
gain in skipping it here. With it off, the second copy of an accepted
reservation until the broker has it is its in-flight record in Redis, and the
orphan sweep re-publishes any reservation still in flight past its grace period.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import uuid

from django.conf import settings
from kombu import Connection, Producer

_local = threading.local()
# A broker that stops answering (memory alarm, partition) must not hold a
# request: past this the publish fails and the purchase answers 503.
PUBLISH_TIMEOUT_S = 3.0


def _producer(confirm: bool) -> tuple[Connection, Producer]:
    from seckill_site.celery import app

    cache = getattr(_local, "producers", None)
    if cache is None:
        cache = _local.producers = {}
    entry = cache.get(confirm)
    if entry is None:
        conn = Connection(app.conf.broker_url, connect_timeout=2,
                          transport_options={"confirm_publish": confirm})
        queue = app.amqp.queues[app.conf.task_default_queue]
        producer = Producer(conn.channel(), exchange=queue.exchange, routing_key=queue.routing_key)
        queue(producer.channel).declare()  # idempotent; the worker declares the same
        entry = cache[confirm] = (conn, producer)
    return entry


def _drop(confirm: bool) -> None:
    entry = getattr(_local, "producers", {}).pop(confirm, None)
    if entry is not None:
        try:
            entry[0].release()
        except Exception:
            pass


def _task_message(payloads: list[dict]) -> tuple[bytes, dict, str]:
    """The message Celery's `apply_async` would send (task protocol 2), built directly."""
    from inventory import signing
    from inventory.tasks import CONFIRM_TASK

    body = {"reservations": payloads}
    task_id = uuid.uuid4().hex
    headers = {
        "lang": "py", "task": CONFIRM_TASK, "id": task_id, "shadow": None, "eta": None, "expires": None,
        "group": None, "group_index": None, "retries": 0, "timelimit": [None, None], "root_id": task_id,
        "parent_id": None, "argsrepr": f"<{len(payloads)} reservation(s)>", "kwargsrepr": "{}",
        "origin": _ORIGIN, "ignore_result": True,
    }
    raw = json.dumps([[body, signing.sign(body)], {}, _EMBED], separators=(",", ":")).encode()
    return raw, headers, task_id


_ORIGIN = f"{os.getpid()}@{socket.gethostname()}"
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


def send_confirm_batch(payloads: list[dict], *, confirm: bool = True) -> None:
    """One signed `confirm_reservation_task` message carrying `payloads`."""
    raw, headers, task_id = _task_message(payloads)
    for attempt in (1, 2):
        try:
            _conn, producer = _producer(confirm)
            producer.publish(
                raw, content_type="application/json", content_encoding="utf-8", headers=headers,
                delivery_mode=2, correlation_id=task_id, reply_to="", retry=False, timeout=PUBLISH_TIMEOUT_S,
            )
            return
        except Exception:
            # A connection that died (broker restarted) is replaced once; a
            # second failure is the broker really being unavailable.
            _drop(confirm)
            if attempt == 2:
                raise


def publish_reservation(payload: dict) -> None:
    """The purchase path's publish (see the module docstring)."""
    send_confirm_batch([payload], confirm=settings.SECKILL_WEB_PUBLISH_CONFIRM)
