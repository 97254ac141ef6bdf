"""Script calls on a cluster: grouped per node, every group written before
any reply is read, each shard checked first (core.redis.instance), and sent
again only where they surely did not run."""
from __future__ import annotations

import time

from redis.cluster import RedisCluster
from redis.exceptions import AskError, ClusterDownError, MovedError, RedisClusterException, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from core.redis.cluster import layout_again
from core.redis.errors import ClusterCallError, RedisError, ShardDown
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
    replies: list = [None] * len(commands)
    pending = list(range(len(commands)))
    deadline = time.monotonic() + CLUSTER_SCRIPT_RETRY_S
    pause = 0.05
    while True:
        groups: dict[str, tuple] = {}
        unsent: set[int] = set()
        first = first_slots(client)
        for i in pending:
            try:
                node = client.get_node_from_key(commands[i][3])
            except RedisClusterException as exc:  # no node serves the slot (its primary lost, none promoted yet)
                replies[i] = ShardDown(f"no node serves {commands[i][3]!r}: {exc}")
                unsent.add(i)
                continue
            groups.setdefault(node.name, (node, first[client.keyslot(commands[i][3])], []))[2].append(i)
        ready = []
        failed: list[str] = []  # nodes that failed or timed out: maybe paused or cut off, and replaced meanwhile
        for node, first_slot, idx in groups.values():  # every check before anything is sent
            try:
                shard_served_by(client, first_slot, node)
            except (RedisError, OSError) as exc:
                for i in idx:  # nothing was sent there
                    replies[i] = exc
                unsent.update(idx)
                if not isinstance(exc, ShardDown):  # (a check under way elsewhere: the node answered)
                    failed.append(node.name)
                continue
            ready.append((node, idx))
        sent = []
        broken: BaseException | None = None
        for node, idx in ready:
            try:
                conn, stack = line_take(client.get_redis_connection(node))
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                for i in idx:  # no connection: nothing was sent there
                    replies[i] = exc
                unsent.update(idx)
                failed.append(node.name)
                continue
            try:
                conn.send_packed_command(conn.pack_commands([commands[i] for i in idx]))
            except BaseException as exc:  # part of it may be on its way
                conn.disconnect()
                broken = broken or exc
                failed.append(node.name)
                continue
            sent.append((conn, stack, idx, node.name))
        for conn, stack, idx, name in sent:
            try:
                for i in idx:
                    try:
                        replies[i] = conn.read_response()
                    except ResponseError as exc:
                        replies[i] = exc
            except BaseException as exc:
                conn.disconnect()
                broken = broken or exc
                failed.append(name)
                continue
            stack.append(conn)
        if broken is not None:
            layout_again(client, failed)
            raise ClusterCallError(f"script call failed on its way: {broken!r}") from broken
        again = [i for i in pending if i in unsent or isinstance(replies[i], _RESEND)]
        if not again:
            return replies
        if time.monotonic() + pause > deadline:
            if failed:
                layout_again(client, failed)
            if len(unsent) == len(commands):
                raise replies[again[0]]  # nothing ran anywhere: a failed connect, as with one Redis
            for i in unsent:  # others ran: this one must not read as "nothing ran"
                replies[i] = ClusterCallError(f"not sent, while the rest of the call ran: {replies[i]!r}")
            return replies
        time.sleep(pause)
        pause = min(pause * 2, 0.2)
        layout_again(client, failed)  # the slots moved, or a node failed (asked last)
        pending = again
