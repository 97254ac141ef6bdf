"""The RabbitMQ connection: one node, or a cluster named by a ';'-separated list.

CELERY_BROKER_URL is one amqp:// URL, or several joined by ';' (the nodes of a
cluster, `bash scripts/cluster up`). Celery hands such a list to kombu itself;
the project's own connections (the group publisher, the confirm consumer, the
health probe) come from here, so that every one of them tries every node.

kombu fails over across the list on connection errors only, and less than it
seems: `Connection.connect()` and the implicit connect of `channel()` try at
most two hosts (max_retries=1, celery/kombu#1594), and a connect timeout spends
the whole retry budget on the first host (same issue). `broker_connect` tries
each node once, in order, with no sleep in between; a caller that fails over
again (after a connection died) names the node it lost, which goes last.
"""
from __future__ import annotations

import random

from django.conf import settings
from kombu import Connection


def broker_urls(url: str | None = None) -> list[str]:
    """The node URLs of CELERY_BROKER_URL (or `url`), in their order."""
    raw = settings.CELERY_BROKER_URL if url is None else url
    return [part.strip() for part in raw.split(";") if part.strip()]


def broker_host(conn: Connection) -> str:
    """The node a connection is on (or last tried): "host:port"."""
    return f"{conn.hostname}:{conn.port}"


def _url_host(url: str) -> str:
    conn = Connection(url)
    return f"{conn.hostname}:{conn.port}"


def broker_connection(*, avoid: str | None = None, **kw) -> Connection:
    """A kombu Connection over every node of CELERY_BROKER_URL, not yet connected.

    Each connection starts at a random node, so the processes of a tier
    spread over the cluster and a node's loss moves only its share of them;
    `avoid` ("host:port", broker_host of a connection that died) puts that
    node last, so the next try goes to another one. Keyword arguments go to
    kombu's Connection (connect_timeout, heartbeat, transport_options ...)."""
    urls = broker_urls()
    if len(urls) > 1:
        start = random.randrange(len(urls))
        urls = urls[start:] + urls[:start]
        if avoid is not None:
            lost = [u for u in urls if _url_host(u) == avoid]
            urls = [u for u in urls if u not in lost] + lost
    kw.setdefault("failover_strategy", "round-robin")
    return Connection(urls if len(urls) > 1 else urls[0], **kw)


def broker_connect(conn: Connection) -> Connection:
    """Connect, trying every node once (the first that answers wins);
    raises the last node's error when none does."""
    conn.ensure_connection(max_retries=max(len(conn.alt), 1) - 1,
                           interval_start=0, interval_step=0, interval_max=0)
    return conn
