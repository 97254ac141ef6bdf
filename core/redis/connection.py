"""Which Redis: one through django-redis (`REDIS_URL=redis://...`) or a Redis
Cluster (`redis+cluster://host:port[,host:port...]`, core.redis.cluster), one
client per process (made again after a fork)."""
from __future__ import annotations

import os
import threading

from django.conf import settings
from django_redis import get_redis_connection
from redis import Redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from core.redis.cluster import cluster_client
from core.redis.errors import ShardDown


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
    return f"database {client.connection_pool.connection_kwargs.get('db', 0)}"
