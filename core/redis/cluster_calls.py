"""Script calls on a cluster: grouped per node, every group written before
any reply is read, each shard checked first (core.redis.instance), and sent
again only where they surely did not run."""
from __future__ import annotations

import time
from typing import NoReturn

from redis.cluster import RedisCluster
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ConnectionError as RedisConnectionError,
    MovedError,
    RedisClusterException,
    ResponseError,
    TimeoutError as RedisTimeoutError,
    TryAgainError,
)

from core.adapters.redis_py import commands_send, connection_drop, reply_read
from core.redis.cluster import layout_again
from core.redis.errors import ClusterCallError, NotSent, NotSentTimeout, RedisError, ShardDown
from core.redis.instance import shard_served_by
from core.redis.lines import line_take
from core.redis.shards import first_slots

# A script call on a cluster is sent again only where it surely did not run:
# a redirect (MOVED, ASK), CLUSTERDOWN or TRYAGAIN reply, or a connect that
# failed. Never after a timeout or a connection lost mid-reply (it may have
# run: redis/redis-py#261), which the caller must treat as unknown. Within
# this budget, backing off, so a failover costs the caller a short wait and
# then an error (a 503), not a web slot held for the election.
CLUSTER_SCRIPT_RETRY_S = 0.6
_RESEND = (MovedError, AskError, ClusterDownError, TryAgainError)


def cluster_evalsha(client: RedisCluster, commands: list[tuple]) -> list:
    """Each EVALSHA on the node serving its key, sent again where it surely
    did not run until CLUSTER_SCRIPT_RETRY_S is spent; the replies in order,
    a script's error reply as its exception."""
    replies: list = [None] * len(commands)
    pending = list(range(len(commands)))
    deadline = time.monotonic() + CLUSTER_SCRIPT_RETRY_S
    pause = 0.05
    while True:
        attempt = _Attempt(client, commands, replies)
        attempt.run(pending)
        if attempt.broken is not None:
            layout_again(client, attempt.failed)
            raise ClusterCallError(f"script call failed on its way: {attempt.broken!r}") from attempt.broken
        again = [i for i in pending if i in attempt.unsent or isinstance(replies[i], _RESEND)]
        if not again:
            return replies
        if time.monotonic() + pause > deadline:
            return _given_up(attempt, again)
        time.sleep(pause)
        pause = min(pause * 2, 0.2)
        layout_again(client, attempt.failed)  # the slots moved, or a node failed (asked last)
        pending = again


class _Attempt:
    """One try of the commands still pending: grouped per node, every node's
    shard checked before anything is sent, every group written before any
    reply is read. It records what it never sent, the nodes that failed, and
    the first failure after a send began (the call's outcome is then unknown)."""

    def __init__(self, client: RedisCluster, commands: list[tuple], replies: list):
        self.client, self.commands, self.replies = client, commands, replies
        self.unsent: set[int] = set()
        self.failed: list[str] = []  # nodes that failed or timed out: maybe paused or cut off, and replaced meanwhile
        self.broken: BaseException | None = None

    def run(self, pending: list[int]) -> None:
        self._read(self._send(self._check(self._by_node(pending))))

    def _not_sent(self, idx: list[int], exc: BaseException) -> None:
        for i in idx:
            self.replies[i] = exc
        self.unsent.update(idx)

    def _by_node(self, pending: list[int]) -> list[tuple]:
        """(node, first slot of its shard, indexes) for each node serving a pending key."""
        groups: dict[str, tuple] = {}
        first = first_slots(self.client)
        for i in pending:
            name = self.commands[i][3]
            try:
                node = self.client.get_node_from_key(name)
            except RedisClusterException as exc:  # no node serves the slot (its primary lost, none promoted yet)
                self._not_sent([i], ShardDown(f"no node serves {name!r}: {exc}"))
                continue
            groups.setdefault(node.name, (node, first[self.client.keyslot(name)], []))[2].append(i)
        return list(groups.values())

    def _check(self, groups: list[tuple]) -> list[tuple]:
        """The groups whose shard is checked on the node serving it now (every check before anything is sent)."""
        ready = []
        for node, first_slot, idx in groups:
            try:
                shard_served_by(self.client, first_slot, node)
            except (RedisError, OSError) as exc:
                self._not_sent(idx, exc)
                if not isinstance(exc, ShardDown):  # (a check under way elsewhere: the node answered)
                    self.failed.append(node.name)
                continue
            ready.append((node, idx))
        return ready

    def _send(self, ready: list[tuple]) -> list[tuple]:
        """Write each group on a connection to its node; (connection, its stack, indexes, node name) of each sent."""
        sent = []
        for node, idx in ready:
            try:
                conn, stack = line_take(self.client.get_redis_connection(node))
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:  # no connection: nothing sent there
                self._not_sent(idx, exc)
                self.failed.append(node.name)
                continue
            try:
                commands_send(conn, [self.commands[i] for i in idx])
            except BaseException as exc:  # part of it may be on its way
                self._broke(conn, node.name, exc)
                continue
            sent.append((conn, stack, idx, node.name))
        return sent

    def _read(self, sent: list[tuple]) -> None:
        for conn, stack, idx, name in sent:
            try:
                for i in idx:
                    try:
                        self.replies[i] = reply_read(conn)
                    except ResponseError as exc:
                        self.replies[i] = exc
            except BaseException as exc:
                self._broke(conn, name, exc)
                continue
            stack.append(conn)

    def _broke(self, conn, name: str, exc: BaseException) -> None:
        connection_drop(conn)  # a reply half read is never taken for the next call
        self.broken = self.broken or exc
        self.failed.append(name)


def _given_up(attempt: _Attempt, again: list[int]) -> list:
    """The budget is spent with `again` still to send: raise if nothing ran
    anywhere, else the replies with each one not sent as a ClusterCallError."""
    replies = attempt.replies
    if attempt.failed:
        layout_again(attempt.client, attempt.failed)
    if len(attempt.unsent) == len(replies):
        _nothing_ran(replies[again[0]])
    for i in attempt.unsent:  # others ran: this one must not read as "nothing ran"
        replies[i] = ClusterCallError(f"not sent, while the rest of the call ran: {replies[i]!r}")
    return replies


def _nothing_ran(exc: BaseException) -> NoReturn:
    """Raise for a call none of which was sent: NotSent, as a failed connect on
    one Redis, where the node did not answer (its connect or its check).
    ShardDown (no node serves the slot, or a check is under way) and any other
    failure of the check keep their type, which a ConnectionError would turn
    into a store to wait out (core.retry)."""
    if isinstance(exc, (NotSent, ShardDown)) or not isinstance(exc, (RedisConnectionError, RedisTimeoutError, OSError)):
        raise exc
    not_sent = NotSentTimeout if isinstance(exc, (RedisTimeoutError, TimeoutError)) else NotSent
    raise not_sent(f"no part of the script call was sent: {exc!r}") from exc
