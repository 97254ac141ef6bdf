"""The Redis Cluster client: a `redis.cluster.RedisCluster` built here
(django-redis has no cluster client), reading from primaries only, with
socket and connect timeouts and retries with backoff, whose every failure is
a RedisError as one Redis's are; and reading the cluster's layout again."""
from __future__ import annotations

import logging

from django.conf import settings
from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from core.adapters.redis_py import ClusterClient, layout_read
from core.redis.errors import RedisError, ShardDown

logger = logging.getLogger(__name__)

# Cluster timeouts: a paused master must fail a call within a second, not hold
# a web slot; a connect to a dead node fails fast. Retries (redis-py's, of
# plain commands: script calls are sent again only where they surely did not
# run, core.redis.cluster_calls) back off, so a failover's 3-4 s are not spent
# in a tight loop of refused connects.
CLUSTER_SOCKET_TIMEOUT_S = 1.0
CLUSTER_CONNECT_TIMEOUT_S = 0.5
CLUSTER_RETRIES = 3


class _ClusterClient(ClusterClient):
    """RedisCluster whose every failure is a RedisError, as one Redis's are."""

    def failure(self, exc: RedisClusterException) -> Exception:
        return ShardDown(str(exc))


def cluster_client(nodes: list[tuple[str, int]]) -> RedisCluster:
    return _ClusterClient(
        startup_nodes=[ClusterNode(host, port) for host, port in nodes],
        socket_timeout=CLUSTER_SOCKET_TIMEOUT_S, socket_connect_timeout=CLUSTER_CONNECT_TIMEOUT_S,
        retry=Retry(ExponentialWithJitterBackoff(base=0.05, cap=0.5), CLUSTER_RETRIES),
        require_full_coverage=False,  # a shard down leaves the others selling
        username=settings.REDIS_CLUSTER_USERNAME, password=settings.REDIS_CLUSTER_PASSWORD,
    )


def layout_again(client: RedisCluster, failed: list[str]) -> None:
    """Read the cluster's layout again, the nodes in `failed` asked last. After
    a timeout too (as redis-py does for its own commands): a paused master's
    replica is promoted within seconds, and a layout left as it was would send
    every later call of its slots into the same timeout until it woke up."""
    try:
        layout_read(client, failed)
    except (RedisError, RedisClusterException) as exc:  # no node answers: the next call tries again
        logger.info("cluster layout not read again yet: %r", exc)
