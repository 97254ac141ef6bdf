"""A new Redis instance is not trusted until it was checked.

Redis empties its script cache when the server restarts, when a replica is
promoted, and on SCRIPT FLUSH; it keeps it otherwise. So a NOSCRIPT may say
the server is a new instance, whose data may be older than what was lost (an
RDB or append-only file, a replica that lagged); or only that a deploy
changed a script. A sentinel script that never changes tells them apart: if
it is gone, the cache was emptied. Then, before any script is loaded again,
the hooks apps registered run, once per instance (its run id, recorded in
the shard's instance key once they succeeded); other processes wait for
them. Scripts are loaded only through this path, so no script runs on a new
instance before its check.

On a cluster the check is per shard, and a script cache is not proof enough:
a replica that was a primary before keeps the scripts it loaded then, so a
promotion may bring no NOSCRIPT. Each process therefore also checks a shard
whenever the node serving it is not the one it last checked (the first call,
a failover, a planned CLUSTER FAILOVER): the run id must be the one recorded,
and a promoted replica's is not (the key came from its old primary). And
again once its last check is SHARD_RECHECK_S old: a node can lose the shard
and get it back (a tenure of another node in between that this process never
met, its own name and scripts unchanged), and its data may then be older
than its successor's; that takes a failure of the successor, whose
promotion comes no sooner than the cluster's node timeout (2 s in
scripts/cluster and compose; the check's period must stay below it). Only a planned
failover and back within the period goes unseen, and both handovers wait
for the replica to be in sync: nothing is lost with them.
"""
from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Protocol

from redis import Redis
from redis.cluster import RedisCluster

from core.redis.connection import clustered, script_scope
from core.redis.errors import RedisError, ShardDown
from core.redis.keys import key, prefix, text
from core.redis.shards import Shard, shard_of, slot_tag

logger = logging.getLogger(__name__)

INSTANCE_CHECK_WAIT_S = 30.0
# The checker's lock lapses this soon, so a checker that died (its process
# killed) holds the others back only that long; a check that outlives it may
# run twice, which is safe (dropping and fencing a snapshot again only pauses).
INSTANCE_CHECK_LOCK_S = 5
_new_instance_hooks: list[Callable[[Shard], None]] = []
_checking = threading.local()


class ScriptFolder(Protocol):
    def load_all(self, client: Redis) -> None: ...


_folders: list[ScriptFolder] = []


def instance_key() -> str:
    """The one Redis's instance key (a cluster shard's: Shard.key("instance"))."""
    return key("instance")


def on_new_instance(hook: Callable[[Shard], None]) -> None:
    """Run `hook(shard)` when a new Redis instance is met, before any script runs on it."""
    if hook not in _new_instance_hooks:
        _new_instance_hooks.append(hook)


def load_on_every_check(folder: ScriptFolder) -> None:
    """Load this folder's scripts whenever an instance is checked (core.redis.scripts.Scripts)."""
    _folders.append(folder)


def checking() -> bool:
    """Is this thread running the check of an instance (its hooks load and call scripts)?"""
    return getattr(_checking, "active", False)


def _sentinel(client: Redis) -> tuple[str, str]:
    """A script loaded by every check and never changed: while the cache holds
    it, the cache was not emptied since the last check (a deploy whose scripts
    changed meets NOSCRIPT too, and must not be taken for a new instance)."""
    body = f"-- seckill: the instance check's sentinel, {prefix()}, {script_scope(client)}\nreturn 1"
    return hashlib.sha1(body.encode()).hexdigest(), body


def _load_everything(client: Redis, sentinel: str) -> None:
    # Every script now, so that no later NOSCRIPT on this instance comes from a
    # script merely not used yet; the sentinel last, once the rest is ready.
    for folder in _folders:
        folder.load_all(client)
    client.script_load(sentinel)


def instance_check(shard: Shard | Redis, *, recorded_only: bool = False) -> None:
    """Check the instance behind `shard` (NOSCRIPT met there, or a new node
    serves it). `recorded_only`: trust the run id recorded, not the cache."""
    if not isinstance(shard, Shard):
        shard = shard_of(shard, "")
    client = shard.client
    sha, sentinel = _sentinel(client)
    if not recorded_only and client.script_exists(sha)[0]:
        return None  # the cache outlived the last check: the same instance, nothing lost with it
    run_id = client.info("server")["run_id"]
    ikey = shard.key("instance")
    if text(client.get(ikey) or b"") == run_id:
        if not client.script_exists(sha)[0]:
            _load_everything(client, sentinel)  # SCRIPT FLUSH on the instance checked before: its data stands
        return None
    lock = f"{ikey}:check:{run_id}"
    if client.set(lock, os.getpid(), nx=True, ex=INSTANCE_CHECK_LOCK_S):
        _check_new(shard, run_id, sentinel, lock)
        return None
    if clustered():
        # Other shards sell on meanwhile: a request of this one answers 503 at
        # once rather than hold a web slot (nothing ran: no script before the check).
        raise ShardDown(f"the check of the new Redis instance {run_id} at {shard.name} is under way")
    deadline = time.monotonic() + INSTANCE_CHECK_WAIT_S
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if text(client.get(ikey) or b"") == run_id:
            return None
        if not client.exists(lock):  # the checker failed: try again ourselves
            return instance_check(shard, recorded_only=recorded_only)
    raise RedisError(f"the check of the new Redis instance {run_id} at {shard.name} did not finish")


def _check_new(shard: Shard, run_id: str, sentinel: str, lock: str) -> None:
    """Run the hooks on a new instance (this process holds its check's lock),
    then load every script and record the instance as checked."""
    client = shard.client
    logger.warning("new Redis instance %s at %s: checking its data before any script runs", run_id, shard.name)
    _checking.active = True
    try:
        for hook in _new_instance_hooks:
            hook(shard)
        _load_everything(client, sentinel)
        client.set(shard.key("instance"), run_id)
    finally:
        _checking.active = False
        client.delete(lock)


SHARD_RECHECK_S = 1.0


class _Served:
    """Per process: the node this process last checked for each shard, and
    when (a cluster's first slot of a range -> (node name, time.monotonic()))."""

    def __init__(self) -> None:
        self.pid = 0
        self.by_first: dict[int, tuple[str, float]] = {}


_served = _Served()


def shard_served_by(client: RedisCluster, first: int, node) -> None:
    """Check the shard before a script call from a node this process has not
    checked it on (first contact, a promotion, a planned failover), or last
    checked it on SHARD_RECHECK_S ago."""
    if _served.pid != os.getpid():
        _served.by_first, _served.pid = {}, os.getpid()
    now = time.monotonic()
    name, checked = _served.by_first.get(first, ("", 0.0))
    if (name == node.name and now - checked < SHARD_RECHECK_S) or checking():
        return
    shard = Shard(client.get_redis_connection(node), slot_tag(first), node.name)
    instance_check(shard, recorded_only=True)
    _served.by_first[first] = (node.name, now)
