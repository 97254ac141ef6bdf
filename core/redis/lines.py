"""Script calls on a lower layer of redis-py.

A script called through redis-py's client costs the web more CPU than Redis
spends running it: the pool's checkout and return (a deprecation wrapper, a
pid check, a lock, metrics hooks), the retry wrapper, the response callbacks,
and for a pipeline its own command stack on top
(docs/benchmark.md, "The cost of a click").
Script calls take a lower layer instead: connections made with the pool's
settings (host, database, timeouts) kept on a stack per pool, last used first
(list.pop and list.append are atomic: no lock), each checked before use as
the pool checks one it hands out (connected, nothing unread: a connection the
server closed is made again), with the EVALSHAs of a call sent in one write.
No retry: the client's own connections have none either (none is
configured). A connection that fails in any way but a script's own error
reply is dropped, so a reply half read is never taken for the next call.
"""
from __future__ import annotations

import os

from redis import Redis
from redis.exceptions import ResponseError

from core.adapters.redis_py import (
    commands_send,
    connection_drop,
    connection_new,
    connection_ready,
    reply_read,
)
from core.redis.connection import not_sent_on_connect


class _Lines:
    def __init__(self) -> None:
        self.pid = 0
        self.free: dict = {}  # connection pool -> its stack (a process may hold more than one client)


_lines = _Lines()


def line_take(client: Redis) -> tuple:
    """A checked connection with the client's settings, and the stack it goes
    back to; NotSent if it cannot be made (core.redis.connection)."""
    pool = client.connection_pool
    if _lines.pid != os.getpid():  # first use, or a fork: the parent's connections stay its own
        _lines.free, _lines.pid = {}, os.getpid()
    stack = _lines.free.get(pool)
    if stack is None:
        stack = _lines.free.setdefault(pool, [])
    try:
        conn = stack.pop()
    except IndexError:
        conn = connection_new(client, not_sent_on_connect)
    connection_ready(conn)
    return conn, stack


def evalsha_on_one(client: Redis, commands: list[tuple]) -> list:
    """The commands on one connection, in one write; the replies in order, a
    script's error reply as its exception."""
    conn, stack = line_take(client)
    try:
        commands_send(conn, commands)
        replies = []
        for _ in commands:
            try:
                replies.append(reply_read(conn))
            except ResponseError as exc:  # the reply was read whole: the connection stays usable
                replies.append(exc)
    except BaseException:
        connection_drop(conn)
        raise
    stack.append(conn)
    return replies
