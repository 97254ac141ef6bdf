"""What a Redis call raises, and whether the failure says the call surely
did not run.

Every failure is a redis-py RedisError (also for a cluster, whose own
exceptions are not: `cluster` wraps them), so the apps catch RedisError,
from here. Most failures leave the outcome unknown: a timeout or a connection
lost after the command was written may come after Redis ran it
(redis/redis-py#1140). Only NotSent says it did not: a caller may then forget
what it prepared for the call instead of undoing it.
"""
from __future__ import annotations

from redis.exceptions import ConnectionError as RedisConnectionError, RedisError, TimeoutError as RedisTimeoutError

__all__ = ["ClusterCallError", "NotSent", "NotSentTimeout", "RedisError", "ShardDown"]


class NotSent(RedisConnectionError):
    """The call surely did not reach Redis: the connection it was to be
    written on could not be made (refused, unreachable, cut in the
    handshake), or no part of a cluster call could be sent. A ConnectionError
    still, so whatever waits out a store away waits this out too."""


class NotSentTimeout(NotSent, RedisTimeoutError):
    """A connect that timed out: NotSent, and the TimeoutError redis-py raises."""


class ShardDown(RedisError):
    """No node serves a slot just now (redis-py's SlotNotCoveredError is no RedisError)."""


class ClusterCallError(RedisError):
    """A cluster script call of which some part may have run (never NotSent:
    callers read that as "nothing ran")."""
