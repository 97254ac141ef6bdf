"""Which failures are worth waiting out, and the loops that wait them out.

Only a store being away or busy is transient: a deadlock (1213, also how a
Galera node reports a certification failure at commit), a lock-wait timeout
(1205), a lost or refused connection, a server shutting down, a Galera node
that is not part of the primary component (1047), Redis unreachable.
Everything else (a packet too large, a constraint, a bug) fails the same way
every time, so retrying it forever would wedge the consumer; the
callers split such a batch and set the bad part aside instead.
"""
from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import InterfaceError, OperationalError, close_old_connections, connection
from redis.exceptions import ConnectionError as RedisConnectionError, TimeoutError as RedisTimeoutError

logger = logging.getLogger(__name__)
T = TypeVar("T")

MYSQL_DEADLOCK, MYSQL_LOCK_WAIT_TIMEOUT = 1213, 1205
# Lock conflicts: the same transaction will likely pass on the next try.
MYSQL_CONFLICT = {MYSQL_DEADLOCK, MYSQL_LOCK_WAIT_TIMEOUT}
# The server is away: connection refused or lost, gone away, shutting down,
# too many connections, connection killed, a Galera node not ready for queries
# (1047 WSREP_NOT_READY: it left the primary component; the front moves on).
MYSQL_NOT_READY = 1047
MYSQL_AWAY = {1040, 1053, 1927, 2002, 2003, 2006, 2013, 2055, 4031, MYSQL_NOT_READY}


def mysql_code(exc: BaseException) -> int | None:
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, (RedisConnectionError, RedisTimeoutError, InterfaceError)):
        return True
    if isinstance(exc, OperationalError):
        return mysql_code(exc) in MYSQL_CONFLICT | MYSQL_AWAY
    return False


def with_mysql_retry(fn: Callable[[], T], *, attempts: int = 6, away_s: float | None = None) -> T:
    """Run a statement or transaction again when it may pass on the next try.

    A lock conflict (deadlock, lock-wait timeout, a Galera certification
    failure) is tried again with jittered backoff, `attempts` times in all. A
    server that is away (connection lost or refused, a node not ready) is
    waited out on a fresh connection for up to `away_s` seconds
    (SECKILL_DB_RETRY_SECONDS): the database front moves to a synced node in a
    few seconds. A lost connection may have lost only the answer of a COMMIT
    that took effect, so `fn` must be harmless when run twice: each caller's
    statement is conditional or keyed (docs/failures.md, "A lost commit").
    Inside a caller's transaction nothing is retried: the transaction is gone
    with its connection, and only the caller can start it over."""
    from django.conf import settings

    budget = settings.SECKILL_DB_RETRY_SECONDS if away_s is None else away_s
    give_up_at = None
    conflicts = 0
    while True:
        try:
            return fn()
        except (OperationalError, InterfaceError) as exc:
            code = mysql_code(exc)
            if connection.in_atomic_block:
                raise
            if isinstance(exc, OperationalError) and code in MYSQL_CONFLICT:
                conflicts += 1
                if conflicts >= attempts:
                    raise
                logger.warning("mysql %s, retrying (attempt %d)", code, conflicts)
                time.sleep(min(0.5, 0.01 * 2**conflicts) * (0.5 + random.random()))
                continue
            if not is_transient(exc):
                raise
            now = time.monotonic()
            give_up_at = give_up_at if give_up_at is not None else now + budget
            if now >= give_up_at:
                raise
            logger.warning("mysql away (%s), waiting on a fresh connection", code)
            _drop_mysql_connection()
            time.sleep(min(0.5, max(0.05, give_up_at - now)) * (0.5 + random.random() / 2))


def until_done(fn: Callable[[], T], *, attempts: int | None = None, idle: Callable[[], None] | None = None,
               what: str = "work") -> T:
    """Run `fn` until it succeeds, waiting out transient failures (backoff capped
    at 5 s; `attempts=None`: without end). Any other error propagates at once.
    `idle` runs while waiting (the confirm consumer keeps its broker connection
    alive with it)."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except Exception as exc:
            if not is_transient(exc) or (attempts is not None and attempt >= attempts):
                raise
            logger.warning("%s: store unavailable (%r), retry %d", what, exc, attempt)
            if isinstance(exc, (OperationalError, InterfaceError)):
                _drop_mysql_connection()
            pause = min(5.0, 0.1 * 2 ** min(attempt, 6)) * (0.5 + random.random() / 2)
            deadline = time.monotonic() + pause
            while time.monotonic() < deadline:
                if idle is not None:
                    idle()
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def _drop_mysql_connection() -> None:
    with contextlib.suppress(Exception):  # already broken: forget it
        connection.close()
    close_old_connections()
