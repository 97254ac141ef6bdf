"""The Redis Cluster client: a `redis.cluster.RedisCluster` built here
(django-redis has no cluster client), reading from primaries only, with
socket and connect timeouts and retries with backoff, whose every failure is
a RedisError as one Redis's are; and reading the cluster's layout again."""
from __future__ import annotations

import logging

from django.conf import settings
from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.exceptions import RedisClusterException
from redis.retry import Retry

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


class _Pipeline(ClusterPipeline):
    def execute(self, raise_on_error: bool = True):
        try:
            return super().execute(raise_on_error)
        except RedisClusterException as exc:
            raise ShardDown(str(exc)) from exc


class _ClusterClient(RedisCluster):
    """RedisCluster whose every failure is a RedisError, as one Redis's are."""

    def execute_command(self, *args, **kwargs):
        try:
            return super().execute_command(*args, **kwargs)
        except RedisClusterException as exc:
            raise ShardDown(str(exc)) from exc

    def pipeline(self, transaction=None, shard_hint=None):
        pipe = super().pipeline(transaction, shard_hint)
        pipe.__class__ = _Pipeline
        return pipe


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
        for name in failed:
            client.nodes_manager.move_node_to_end_of_cached_nodes(name)
        client.nodes_manager.initialize(last_failed_node_name=failed[-1] if failed else None)
    except (RedisError, RedisClusterException) as exc:  # no node answers: the next call tries again
        logger.info("cluster layout not read again yet: %r", exc)
