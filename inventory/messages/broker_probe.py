"""The broker as the health check and the live view see it: the confirm
stream's depth, read over one connection kept per process."""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass

from kombu import Connection

from core.broker import broker_connect, broker_connection, broker_host
from inventory.messages.queues import confirm_queue_name, partitions

_probe_lock = threading.Lock()
_probe: dict[str, Connection] = {}
_probe_lost: list[str] = []  # the node of the probe connection that died last


@dataclass(frozen=True)
class QueueDepth:
    messages: int   # waiting to be delivered
    consumers: int


def confirm_queue_depth() -> QueueDepth:
    """The confirm stream's depth: every partition's messages and consumers
    summed. Raises when the broker cannot be reached."""
    depths = confirm_queue_depths()
    return QueueDepth(sum(d.messages for d in depths), sum(d.consumers for d in depths))


def confirm_queue_depths() -> list[QueueDepth]:
    """Each partition's depth, partition 0 first, over one connection kept per
    process (a probe opens no connection per call). Raises when the broker
    cannot be reached."""
    with _probe_lock:
        return [_depth(confirm_queue_name(k)) for k in range(partitions())]


def _depth(name: str) -> QueueDepth:
    """One queue's depth over the kept connection. A kept connection found dead
    (its node lost: a broker cluster) is replaced at once, on another node, so
    one node down never fails the probe."""
    for attempt in (1, 2):
        conn = _probe.get("conn")
        kept = conn is not None
        try:
            if conn is None:
                conn = broker_connection(avoid=_probe_lost[-1] if _probe_lost else None, connect_timeout=2)
                _probe["conn"] = broker_connect(conn)
            _name, messages, consumers = conn.default_channel.queue_declare(queue=name, passive=True)
            return QueueDepth(int(messages), int(consumers))
        except Exception as exc:
            _probe.pop("conn", None)
            if conn is not None:
                _probe_lost[:] = [broker_host(conn)]
                with contextlib.suppress(Exception):
                    conn.release()
            if "NOT_FOUND" in str(exc):  # not declared yet: nothing waits in it
                return QueueDepth(0, 0)
            if not kept or attempt == 2:  # a fresh connection tried every node already
                raise
    raise AssertionError("unreachable")
