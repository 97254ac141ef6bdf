"""Shards: the one Redis, or each primary of a cluster, and the slot tags
that name them.

What a node's loss costs is per shard (a primary and its replicas): its
instance key and its claims fence live on it, under the hash tag of the
first slot of its range, which a promoted replica keeps.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from redis import Redis
from redis.cluster import RedisCluster

from core.adapters.redis_py import connection_settings, key_slot, slots_table
from core.redis.connection import redis
from core.redis.keys import key, prefix, tagged


@dataclass(frozen=True)
class Shard:
    client: Redis  # a plain client of this node (the one Redis itself, when not a cluster)
    tag: str       # "" for the one Redis; else a hash tag of the shard's first slot
    name: str      # host:port of the node serving it now

    def key(self, what: str) -> str:
        return key(what) if not self.tag else f"{tagged(self.tag)}:{what}"

    def scan(self, match: str):
        """Keys of this node only (a cluster's SCAN is per node)."""
        return self.client.scan_iter(match=match, count=1000)

    def unlink_matching(self, match: str) -> int:
        """Delete this node's keys that match, in pipelines of 500 (one key per
        command: a cluster node refuses a multi-key command across slots)."""
        gone = 0
        pipe = self.client.pipeline(transaction=False)
        for name in self.scan(match):
            pipe.unlink(name)
            gone += 1
            if len(pipe) >= 500:
                pipe.execute()
        pipe.execute()
        return gone


@cache
def slot_tag(slot: int) -> str:
    """A short hash tag whose keys land in `slot`."""
    i = 0
    while key_slot(f"s{i}".encode()) != slot:
        i += 1
    return f"s{i}"


class _Ranges:
    def __init__(self) -> None:
        self.of: int = -1  # id() of the slots table these were read from
        self.first: list[int] = []


_ranges = _Ranges()


def first_slots(client: RedisCluster) -> list[int]:
    """For each slot, the first slot of the run served by the same primary."""
    table = slots_table(client)
    if _ranges.of != id(table):
        first, prev, start = [0] * 16384, None, 0
        for slot in range(16384):
            nodes = table.get(slot)
            owner = nodes[0].name if nodes else None
            if owner != prev or owner is None:
                start, prev = slot, owner
            first[slot] = start
        _ranges.first, _ranges.of = first, id(table)
    return _ranges.first


def shard_of(client: Redis | RedisCluster, key_name: str) -> Shard:
    """The shard that holds `key_name`."""
    if not isinstance(client, RedisCluster):
        kw = connection_settings(client)
        return Shard(client, "", f"{kw.get('host')}:{kw.get('port')}/{kw.get('db', 0)}")
    node = client.get_node_from_key(key_name)
    first = first_slots(client)[client.keyslot(key_name)]
    return Shard(client.get_redis_connection(node), slot_tag(first), node.name)


def shards(client: Redis | RedisCluster | None = None) -> list[Shard]:
    """Every shard: the one Redis, or each primary of the cluster."""
    client = client if client is not None else redis()
    if not isinstance(client, RedisCluster):
        return [shard_of(client, "")]
    first = first_slots(client)
    table = slots_table(client)
    return [Shard(client.get_redis_connection(nodes[0]), slot_tag(slot), nodes[0].name)
            for slot in sorted(set(first)) if (nodes := table.get(slot))]


def forget_everything() -> int:
    """Delete every key of this prefix (tests and benchmarks: one Redis's
    FLUSHDB would also take what other prefixes keep on a shared cluster)."""
    return sum(shard.unlink_matching(f"{prefix()}:*") for shard in shards())
