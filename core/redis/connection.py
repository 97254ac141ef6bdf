"""Which Redis: one through django-redis (`REDIS_URL=redis://...`) or a Redis
Cluster (`redis+cluster://host:port[,host:port...]`, core.redis.cluster), one
client per process (made again after a fork); and the connections whose
failed connect raises NotSent.

A connection's connect() runs before anything is written on it (the pool's
checkout, core.redis.lines), so its failure means the command was never sent.
redis-py words that failure ("Error 111 connecting to host:port.") and raises
it as the ConnectionError or TimeoutError it raises for a connection lost
mid-reply too; the connections here raise NotSent instead, keeping the words.
redis-py's own reconnect inside a retry does not go through connect() and
keeps its plain error: an earlier try may have run (the one Redis's pool has
no retry; the cluster client's plain commands do, so their connections are
redis-py's own and only the script calls' are these).
"""
from __future__ import annotations

import os
import threading
from functools import cache

from django.conf import settings
from django_redis import get_redis_connection
from redis import Connection, ConnectionPool, Redis
from redis.cluster import RedisCluster
from redis.exceptions import (
    ConnectionError as RedisConnectionError,
    RedisClusterException,
    TimeoutError as RedisTimeoutError,
)

from core.adapters.redis_py import ConnectFailure, connection_settings
from core.redis.cluster import cluster_client
from core.redis.errors import NotSent, NotSentTimeout, ShardDown


class _Cluster:
    def __init__(self) -> None:
        self.pid = 0
        self.client: RedisCluster | None = None
        self.lock = threading.Lock()


_cluster = _Cluster()


def clustered() -> bool:
    return bool(settings.REDIS_CLUSTER_NODES)


def redis() -> Redis | RedisCluster:
    if not settings.REDIS_CLUSTER_NODES:
        return get_redis_connection("default")
    client = _cluster.client
    if client is not None and _cluster.pid == os.getpid():
        return client
    with _cluster.lock:
        if _cluster.client is None or _cluster.pid != os.getpid():  # first use, or a fork
            try:
                _cluster.client = cluster_client(settings.REDIS_CLUSTER_NODES)
            except RedisClusterException as exc:  # no seed node answers: a store down (503), not a bug (500)
                raise ShardDown(str(exc)) from exc
            _cluster.pid = os.getpid()
        return _cluster.client


def script_scope(client: Redis) -> str:
    """What one script cache serves: the cluster, or one database of one Redis
    (named in every script's text, so each meets its own NOSCRIPT)."""
    if clustered():
        return "cluster"
    return f"database {connection_settings(client).get('db', 0)}"


class _NotSentOnConnect(ConnectFailure):
    """Mixed into a redis-py connection class: connect() failing raises
    NotSent. A failure of a kind of its own (an authentication refused, a
    server still loading) keeps its type, which says more."""

    def connect_failed(self, exc: Exception) -> Exception | None:
        if isinstance(exc, RedisTimeoutError):
            return NotSentTimeout(*exc.args)
        if type(exc) is RedisConnectionError:
            return NotSent(*exc.args)
        return None


@cache
def not_sent_on_connect(connection_class: type) -> type:
    """`connection_class` whose failed connect raises NotSent (itself if it does already)."""
    if issubclass(connection_class, _NotSentOnConnect):
        return connection_class
    return type(f"NotSent{connection_class.__name__}", (_NotSentOnConnect, connection_class), {})


class Pool(ConnectionPool):
    """The one Redis's pool (CACHES' CONNECTION_POOL_CLASS for django-redis):
    connections of the class the URL picks (TCP, TLS, a socket file), whose
    failed connect raises NotSent."""

    def __init__(self, connection_class: type = Connection, **kwargs):
        super().__init__(connection_class=not_sent_on_connect(connection_class), **kwargs)
