"""What a Redis call raises. Every failure is a redis-py RedisError (also for
a cluster, whose own exceptions are not: `cluster` wraps them), so the apps
catch RedisError, from here."""
from __future__ import annotations

from redis.exceptions import RedisError

__all__ = ["ClusterCallError", "RedisError", "ShardDown"]


class ShardDown(RedisError):
    """No node serves a slot just now (redis-py's SlotNotCoveredError is no RedisError)."""


class ClusterCallError(RedisError):
    """A cluster script call of which some part may have run (never words
    itself as a failed connect: callers read that as "nothing ran")."""
