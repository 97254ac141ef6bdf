"""The Redis connection and the Lua script loader every app's Redis module uses.

Each app keeps its key names and its scripts in one module of its own
(inventory.redis.keys, accounts.token_cache); what they share is here: the
connection, the loading of a folder of scripts, each prefixed with the shared
Lua definitions (core/lua/_lib.lua, then the app's own _lib.lua), as redis-py
Script objects loaded once, and the check of a new instance.

The connection is one Redis through django-redis (`REDIS_URL=redis://...`) or
a Redis Cluster (`redis+cluster://host:port[,host:port...]`): a
`redis.cluster.RedisCluster` built here (django-redis has no cluster client),
reading from primaries only, with socket and connect timeouts and retries with
backoff. Every key starts with SECKILL_REDIS_PREFIX (`key()`).
"""
from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

from django.conf import settings
from django_redis import get_redis_connection
from redis import Redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.commands.core import Script
from redis.crc import key_slot
from redis.exceptions import AskError, ClusterDownError, MovedError, RedisClusterException, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError  # noqa: F401  (re-exported)
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

logger = logging.getLogger(__name__)

CORE_LIB = Path(__file__).resolve().parent / "lua" / "_lib.lua"


def prefix() -> str:
    return settings.SECKILL_REDIS_PREFIX


def key(*parts: str) -> str:
    """A key of the project's: the prefix, then the parts, joined by ':'."""
    return ":".join((prefix(), *parts))


def tagged(tag: str) -> str:
    """The head of the keys that share the hash tag `tag` (one Cluster slot)."""
    return f"{prefix()}:{{{tag}}}"


# --- The client -----------------------------------------------------------------------------
# Cluster timeouts: a paused master must fail a call within a second, not hold
# a web slot; a connect to a dead node fails fast. Retries (of plain commands:
# script calls are not retried, below) back off, so a failover's 3-4 s are not
# spent in a tight loop of refused connects.
CLUSTER_SOCKET_TIMEOUT_S = 1.0
CLUSTER_CONNECT_TIMEOUT_S = 0.5
CLUSTER_RETRIES = 3


class _Cluster:
    def __init__(self) -> None:
        self.pid = 0
        self.client: RedisCluster | None = None
        self.lock = threading.Lock()


_cluster = _Cluster()


def clustered() -> bool:
    return bool(settings.REDIS_CLUSTER_NODES)


def redis() -> Redis | RedisCluster:
    if not settings.REDIS_CLUSTER_NODES:
        return get_redis_connection("default")
    client = _cluster.client
    if client is not None and _cluster.pid == os.getpid():
        return client
    with _cluster.lock:
        if _cluster.client is None or _cluster.pid != os.getpid():  # first use, or a fork
            try:
                _cluster.client = cluster_client(settings.REDIS_CLUSTER_NODES)
            except RedisClusterException as exc:  # no seed node answers: a store down (503), not a bug (500)
                raise ShardDown(str(exc)) from exc
            _cluster.pid = os.getpid()
        return _cluster.client


class ShardDown(RedisError):
    """No node serves a slot just now (redis-py's SlotNotCoveredError is no RedisError)."""


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


# --- Shards: one Redis, or each primary of a cluster --------------------------------------------
# What a node's loss costs is per shard (a primary and its replicas): its
# instance key and its claims fence live on it, under the hash tag of the
# first slot of its range, which a promoted replica keeps.

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


@lru_cache(maxsize=None)
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


def _first_slots(client: RedisCluster) -> list[int]:
    """For each slot, the first slot of the run served by the same primary."""
    table = client.nodes_manager.slots_cache
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
        kw = client.connection_pool.connection_kwargs
        return Shard(client, "", f"{kw.get('host')}:{kw.get('port')}/{kw.get('db', 0)}")
    node = client.get_node_from_key(key_name)
    first = _first_slots(client)[client.keyslot(key_name)]
    return Shard(client.get_redis_connection(node), slot_tag(first), node.name)


def shards(client: Redis | RedisCluster | None = None) -> list[Shard]:
    """Every shard: the one Redis, or each primary of the cluster."""
    client = client if client is not None else redis()
    if not isinstance(client, RedisCluster):
        return [shard_of(client, "")]
    first = _first_slots(client)
    table = client.nodes_manager.slots_cache
    return [Shard(client.get_redis_connection(nodes[0]), slot_tag(slot), nodes[0].name)
            for slot in sorted(set(first)) if (nodes := table.get(slot))]


# --- A new Redis instance is not trusted until it was checked ---------------------------
# Redis empties its script cache when the server restarts, when a replica is
# promoted, and on SCRIPT FLUSH; it keeps it otherwise. So a NOSCRIPT may say
# the server is a new instance, whose data may be older than what was lost (an
# RDB or append-only file, a replica that lagged); or only that a deploy
# changed a script. A sentinel script that never changes tells them apart: if
# it is gone, the cache was emptied. Then, before any script is loaded again,
# the hooks apps registered run, once per instance (its run id, recorded in
# the shard's instance key once they succeeded); other processes wait for
# them. Scripts are loaded only through this path, so no script runs on a new
# instance before its check.
#
# On a cluster the check is per shard, and a script cache is not proof enough:
# a replica that was a primary before keeps the scripts it loaded then, so a
# promotion may bring no NOSCRIPT. Each process therefore also checks a shard
# whenever the node serving it is not the one it last checked (the first call,
# a failover, a planned CLUSTER FAILOVER): the run id must be the one recorded,
# and a promoted replica's is not (the key came from its old primary). And
# again once its last check is SHARD_RECHECK_S old: a node can lose the shard
# and get it back (a tenure of another node in between that this process never
# met, its own name and scripts unchanged), and its data may then be older
# than its successor's; that takes a failure of the successor, whose
# promotion comes no sooner than the cluster's node timeout (2 s in
# scripts/cluster and compose; the check's period must stay below it). Only a planned
# failover and back within the period goes unseen, and both handovers wait
# for the replica to be in sync: nothing is lost with them.

INSTANCE_CHECK_WAIT_S = 30.0
# The checker's lock lapses this soon, so a checker that died (its process
# killed) holds the others back only that long; a check that outlives it may
# run twice, which is safe (dropping and fencing a snapshot again only pauses).
INSTANCE_CHECK_LOCK_S = 5
_new_instance_hooks: list[Callable[[Shard], None]] = []
_checking = threading.local()


def instance_key() -> str:
    """The one Redis's instance key (a cluster shard's: Shard.key("instance"))."""
    return key("instance")


def on_new_instance(hook: Callable[[Shard], None]) -> None:
    """Run `hook(shard)` when a new Redis instance is met, before any script runs on it."""
    if hook not in _new_instance_hooks:
        _new_instance_hooks.append(hook)


def _scope(client: Redis) -> str:
    if clustered():
        return "cluster"
    return f"database {client.connection_pool.connection_kwargs.get('db', 0)}"


def _sentinel(client: Redis) -> tuple[str, str]:
    """A script loaded by every check and never changed: while the cache holds
    it, the cache was not emptied since the last check (a deploy whose scripts
    changed meets NOSCRIPT too, and must not be taken for a new instance)."""
    body = f"-- seckill: the instance check's sentinel, {prefix()}, {_scope(client)}\nreturn 1"
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
        return  # the cache outlived the last check: the same instance, nothing lost with it
    run_id = client.info("server")["run_id"]
    ikey = shard.key("instance")
    if text(client.get(ikey) or b"") == run_id:
        if not client.script_exists(sha)[0]:
            _load_everything(client, sentinel)  # SCRIPT FLUSH on the instance checked before: its data stands
        return
    lock = f"{ikey}:check:{run_id}"
    if client.set(lock, os.getpid(), nx=True, ex=INSTANCE_CHECK_LOCK_S):
        logger.warning("new Redis instance %s at %s: checking its data before any script runs", run_id, shard.name)
        _checking.active = True
        try:
            for hook in _new_instance_hooks:
                hook(shard)
            _load_everything(client, sentinel)
            client.set(ikey, run_id)
        finally:
            _checking.active = False
            client.delete(lock)
        return
    if clustered():
        # Other shards sell on meanwhile: a request of this one answers 503 at
        # once rather than hold a web slot (nothing ran: no script before the check).
        raise ShardDown(f"the check of the new Redis instance {run_id} at {shard.name} is under way")
    deadline = time.monotonic() + INSTANCE_CHECK_WAIT_S
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if text(client.get(ikey) or b"") == run_id:
            return
        if not client.exists(lock):  # the checker failed: try again ourselves
            return instance_check(shard, recorded_only=recorded_only)
    raise RedisError(f"the check of the new Redis instance {run_id} at {shard.name} did not finish")


SHARD_RECHECK_S = 1.0


class _Served:
    """Per process: the node this process last checked for each shard, and
    when (a cluster's first slot of a range -> (node name, time.monotonic()))."""

    def __init__(self) -> None:
        self.pid = 0
        self.by_first: dict[int, tuple[str, float]] = {}


_served = _Served()


def _shard_served_by(client: RedisCluster, first: int, node) -> None:
    """Check the shard before a script call from a node this process has not
    checked it on (first contact, a promotion, a planned failover), or last
    checked it on SHARD_RECHECK_S ago."""
    if _served.pid != os.getpid():
        _served.by_first, _served.pid = {}, os.getpid()
    now = time.monotonic()
    name, checked = _served.by_first.get(first, ("", 0.0))
    if (name == node.name and now - checked < SHARD_RECHECK_S) or getattr(_checking, "active", False):
        return
    shard = Shard(client.get_redis_connection(node), slot_tag(first), node.name)
    instance_check(shard, recorded_only=True)
    _served.by_first[first] = (node.name, now)


# --- Script calls on a lower layer of redis-py ---------------------------------------
# A script called through redis-py's client costs the web more CPU than Redis
# spends running it: the pool's checkout and return (a deprecation wrapper, a
# pid check, a lock, metrics hooks), the retry wrapper, the response callbacks,
# and for a pipeline its own command stack on top
# (docs/benchmark.md, "The cost of a click").
# Script calls take a lower layer instead: connections made with the pool's
# settings (host, database, timeouts) kept on a stack per pool, last used first
# (list.pop and list.append are atomic: no lock), each checked before use as
# the pool checks one it hands out (connected, nothing unread: a connection the
# server closed is made again), with the EVALSHAs of a call sent in one write.
# No retry: the client's own connections have none either (none is
# configured). A connection that fails in any way but a script's own error
# reply is dropped, so a reply half read is never taken for the next call.

class _Lines:
    def __init__(self) -> None:
        self.pid = 0
        self.free: dict = {}  # connection pool -> its stack (a process may hold more than one client)


_lines = _Lines()


def _line_take(client: Redis) -> tuple:
    """A checked connection with the client's settings, and the stack it goes back to."""
    pool = client.connection_pool
    if _lines.pid != os.getpid():  # first use, or a fork: the parent's connections stay its own
        _lines.free, _lines.pid = {}, os.getpid()
    stack = _lines.free.get(pool)
    if stack is None:
        stack = _lines.free.setdefault(pool, [])
    try:
        conn = stack.pop()
    except IndexError:
        conn = pool.connection_class(**pool.connection_kwargs)
    if not conn.is_connected:
        conn.connect()
        return conn, stack
    try:
        stale = conn.can_read()  # unread data, or the server closed it (a restart)
    except (RedisConnectionError, RedisTimeoutError, OSError):
        stale = True
    if stale:
        conn.disconnect()
        conn.connect()
    return conn, stack


def evalsha_together(client: Redis | RedisCluster, commands: list[tuple]) -> list:
    """Each ("EVALSHA", sha, numkeys, *keys, *args) in one round trip (on a
    cluster: one per node, all sent before any is read); the replies in
    order, a script's error reply (NOSCRIPT...) as its exception."""
    if isinstance(client, RedisCluster):
        return _cluster_evalsha(client, commands)
    conn, stack = _line_take(client)
    try:
        conn.send_packed_command(conn.pack_commands(commands))
        replies = []
        for _ in commands:
            try:
                replies.append(conn.read_response())
            except ResponseError as exc:  # the reply was read whole: the connection stays usable
                replies.append(exc)
    except BaseException:
        conn.disconnect()
        raise
    stack.append(conn)
    return replies


# A script call on a cluster is sent again only where it surely did not run:
# a redirect (MOVED, ASK), CLUSTERDOWN or TRYAGAIN reply, or a connect that
# failed. Never after a timeout or a connection lost mid-reply (it may have
# run: redis/redis-py#261), which the caller must treat as unknown. Within
# this budget, backing off, so a failover costs the caller a short wait and
# then an error (a 503), not a web slot held for the election.
CLUSTER_SCRIPT_RETRY_S = 0.6
_RESEND = (MovedError, AskError, ClusterDownError, TryAgainError)


class ClusterCallError(RedisError):
    """A cluster script call of which some part may have run (never words
    itself as a failed connect: callers read that as "nothing ran")."""


def _cluster_evalsha(client: RedisCluster, commands: list[tuple]) -> list:
    replies: list = [None] * len(commands)
    pending = list(range(len(commands)))
    deadline = time.monotonic() + CLUSTER_SCRIPT_RETRY_S
    pause = 0.05
    while True:
        groups: dict[str, tuple] = {}
        unsent: set[int] = set()
        first = _first_slots(client)
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
                _shard_served_by(client, first_slot, node)
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
                conn, stack = _line_take(client.get_redis_connection(node))
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
            _layout_again(client, failed)
            raise ClusterCallError(f"script call failed on its way: {broken!r}") from broken
        again = [i for i in pending if i in unsent or isinstance(replies[i], _RESEND)]
        if not again:
            return replies
        if time.monotonic() + pause > deadline:
            if failed:
                _layout_again(client, failed)
            if len(unsent) == len(commands):
                raise replies[again[0]]  # nothing ran anywhere: a failed connect, as with one Redis
            for i in unsent:  # others ran: this one must not read as "nothing ran"
                replies[i] = ClusterCallError(f"not sent, while the rest of the call ran: {replies[i]!r}")
            return replies
        time.sleep(pause)
        pause = min(pause * 2, 0.2)
        _layout_again(client, failed)  # the slots moved, or a node failed (asked last)
        pending = again


def _layout_again(client: RedisCluster, failed: list[str]) -> None:
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


class GuardedScript(Script):
    """A redis-py Script whose reload after NOSCRIPT waits for `instance_check`
    (of the shard that answered it)."""

    def __call__(self, keys=None, args=None, client=None):
        keys, args = list(keys or []), list(args or [])
        client = client if client is not None else self.registered_client
        reply = evalsha_together(client, [("EVALSHA", self.sha, len(keys), *keys, *args)])[0]
        if isinstance(reply, NoScriptError):
            self.reload(client, keys[0] if keys else "")
            reply = evalsha_together(client, [("EVALSHA", self.sha, len(keys), *keys, *args)])[0]
        if isinstance(reply, Exception):
            raise reply
        return reply

    def reload(self, client: Redis | RedisCluster, key_name: str) -> None:
        shard = shard_of(client, key_name)
        if not getattr(_checking, "active", False):
            instance_check(shard)
        self.sha = shard.client.script_load(self.script)


_folders: list["Scripts"] = []


class Scripts:
    """The scripts of one folder. `get(name)` is the Script for `<name>.lua`;
    its `.sha` is known without a round trip, so a hot path can pipeline it.
    The text names the prefix and the database, so each database and prefix
    sharing a server meets its own NOSCRIPT after a restart (and is checked).
    A script is called through its layout (core.lua_layout), which also says
    what it answers."""

    def __init__(self, folder: Path):
        self.folder = folder
        _folders.append(self)

    def load_all(self, client: Redis) -> None:
        for path in sorted(self.folder.glob("*.lua")):
            if not path.name.startswith("_"):
                script = self.get(path.stem)
                script.sha = client.script_load(script.script)

    # One Scripts per app for the process's life: the cache holding `self` leaks nothing.
    @lru_cache(maxsize=None)  # noqa: B019
    def get(self, name: str) -> Script:
        client = redis()
        parts = [f"-- seckill, {prefix()}, {_scope(client)}", CORE_LIB.read_text()]
        own = self.folder / "_lib.lua"
        if own.exists():
            parts.append(own.read_text())
        parts.append((self.folder / f"{name}.lua").read_text())
        return GuardedScript(client, "\n".join(parts))

    def __hash__(self) -> int:
        return hash(self.folder)


def text(v: str | bytes) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class Call:
    """One script call that can ride in a pipeline with calls of other modules
    (each in its own Cluster slot): `run_together` sends them in one round trip."""

    def __init__(self, script: Script, keys: list, args: list):
        self.script, self.keys, self.args = script, keys, args

    def command(self) -> tuple:
        return ("EVALSHA", self.script.sha, len(self.keys), *self.keys, *self.args)

    def run(self):
        return self.script(keys=self.keys, args=self.args)

    def settle(self, raw):
        # Each command of a pipeline runs on its own: after a Redis restart one
        # script may be unknown while another ran. Load and run just that one.
        if isinstance(raw, NoScriptError):
            return self.run()
        if isinstance(raw, Exception):
            raise raw
        return raw


def run_together(*calls: Call) -> list:
    replies = evalsha_together(redis(), [call.command() for call in calls])
    return [call.settle(raw) for call, raw in zip(calls, replies)]


def __getattr__(name: str):
    if name == "INSTANCE_KEY":  # the one Redis's, read from the settings when asked
        return instance_key()
    raise AttributeError(name)


def forget_everything() -> int:
    """Delete every key of this prefix (tests and benchmarks: one Redis's
    FLUSHDB would also take what other prefixes keep on a shared cluster)."""
    return sum(shard.unlink_matching(f"{prefix()}:*") for shard in shards())
