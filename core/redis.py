"""The Redis connection and the Lua script loader every app's Redis module uses.

Each app keeps its key names and its scripts in one module of its own
(inventory.redis.keys, accounts.token_cache); what they share is here: the
connection (django-redis) and the loading of a folder of scripts, each prefixed
with the shared Lua definitions (core/lua/_lib.lua, then the app's own
_lib.lua), as redis-py Script objects loaded once.
"""
from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from functools import lru_cache
from pathlib import Path
from typing import Callable

from django_redis import get_redis_connection
from redis import Redis
from redis.commands.core import Script
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError  # noqa: F401  (re-exported)
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

logger = logging.getLogger(__name__)

CORE_LIB = Path(__file__).resolve().parent / "lua" / "_lib.lua"


def redis() -> Redis:
    return get_redis_connection("default")


# --- A new Redis instance is not trusted until it was checked ---------------------------
# Redis empties its script cache when the server restarts, when a replica is
# promoted, and on SCRIPT FLUSH; it keeps it otherwise. So a NOSCRIPT may say
# the server is a new instance, whose data may be older than what was lost (an
# RDB or append-only file, a replica that lagged); or only that a deploy
# changed a script. A sentinel script that never changes tells them apart: if
# it is gone, the cache was emptied. Then, before any script is loaded again,
# the hooks apps registered run, once per instance (its run id, recorded in
# INSTANCE_KEY once they succeeded); other processes wait for them. Scripts
# are loaded only through this path, so no script runs on a new instance
# before its check.

INSTANCE_KEY = "seckill:instance"
INSTANCE_CHECK_WAIT_S = 30.0
# The checker's lock lapses this soon, so a checker that died (its process
# killed) holds the others back only that long; a check that outlives it may
# run twice, which is safe (dropping and fencing a snapshot again only pauses).
INSTANCE_CHECK_LOCK_S = 5
_new_instance_hooks: list[Callable[[], None]] = []
_checking = threading.local()


def on_new_instance(hook: Callable[[], None]) -> None:
    """Run `hook` when a new Redis instance is met, before any script runs on it."""
    if hook not in _new_instance_hooks:
        _new_instance_hooks.append(hook)


def _sentinel(client: Redis) -> tuple[str, str]:
    """A script loaded by every check and never changed: while the cache holds
    it, the cache was not emptied since the last check (a deploy whose scripts
    changed meets NOSCRIPT too, and must not be taken for a new instance)."""
    db = client.connection_pool.connection_kwargs.get("db", 0)
    body = f"-- seckill: the instance check's sentinel, database {db}\nreturn 1"
    return hashlib.sha1(body.encode()).hexdigest(), body


def _load_everything(client: Redis, sentinel: str) -> None:
    # Every script now, so that no later NOSCRIPT on this instance comes from a
    # script merely not used yet; the sentinel last, once the rest is ready.
    for folder in _folders:
        folder.load_all(client)
    client.script_load(sentinel)


def instance_check(client: Redis) -> None:
    sha, sentinel = _sentinel(client)
    if client.script_exists(sha)[0]:
        return  # the cache outlived the last check: the same instance, nothing lost with it
    run_id = client.info("server")["run_id"]
    if text(client.get(INSTANCE_KEY) or b"") == run_id:
        _load_everything(client, sentinel)  # SCRIPT FLUSH on the instance checked before: its data stands
        return
    lock = f"{INSTANCE_KEY}:check:{run_id}"
    if client.set(lock, os.getpid(), nx=True, ex=INSTANCE_CHECK_LOCK_S):
        logger.warning("new Redis instance %s: checking its data before any script runs", run_id)
        _checking.active = True
        try:
            for hook in _new_instance_hooks:
                hook()
            _load_everything(client, sentinel)
            client.set(INSTANCE_KEY, run_id)
        finally:
            _checking.active = False
            client.delete(lock)
        return
    deadline = time.monotonic() + INSTANCE_CHECK_WAIT_S
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if text(client.get(INSTANCE_KEY) or b"") == run_id:
            return
        if not client.exists(lock):  # the checker failed: try again ourselves
            return instance_check(client)
    raise RedisError(f"the check of the new Redis instance {run_id} did not finish")


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


def evalsha_together(client: Redis, commands: list[tuple]) -> list:
    """Each ("EVALSHA", sha, numkeys, *keys, *args) in one round trip; the
    replies in order, a script's error reply (NOSCRIPT...) as its exception."""
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


class GuardedScript(Script):
    """A redis-py Script whose reload after NOSCRIPT waits for `instance_check`."""

    def __call__(self, keys=None, args=None, client=None):
        keys, args = list(keys or []), list(args or [])
        client = client if client is not None else self.registered_client
        reply = evalsha_together(client, [("EVALSHA", self.sha, len(keys), *keys, *args)])[0]
        if isinstance(reply, NoScriptError):
            if not getattr(_checking, "active", False):
                instance_check(client)
            self.sha = client.script_load(self.script)
            reply = evalsha_together(client, [("EVALSHA", self.sha, len(keys), *keys, *args)])[0]
        if isinstance(reply, Exception):
            raise reply
        return reply


_folders: list["Scripts"] = []


class Scripts:
    """The scripts of one folder. `get(name)` is the Script for `<name>.lua`;
    its `.sha` is known without a round trip, so a hot path can pipeline it.
    The text names the database, so each database sharing a server meets its
    own NOSCRIPT after a restart (and is checked).

    Every script either answers data (`answers_data`: lists, counts) or has
    its outcomes mirrored by an enum (`@scripts.returns(name)`): `codes` maps
    each script to its enum, so a test holds the Lua and Python side by side."""

    def __init__(self, folder: Path, *, answers_data: tuple[str, ...] = ()):
        self.folder = folder
        self.answers_data = frozenset(answers_data)
        self.codes: dict[str, type] = {}
        _folders.append(self)

    def returns(self, name: str) -> Callable[[type], type]:
        """Class decorator: this enum mirrors the return codes of `<name>.lua`."""
        def register(cls: type) -> type:
            if name in self.codes or name in self.answers_data:
                raise ValueError(f"{name}.lua already has its answers declared")
            self.codes[name] = cls
            return cls
        return register

    def load_all(self, client: Redis) -> None:
        for path in sorted(self.folder.glob("*.lua")):
            if not path.name.startswith("_"):
                script = self.get(path.stem)
                script.sha = client.script_load(script.script)

    # One Scripts per app for the process's life: the cache holding `self` leaks nothing.
    @lru_cache(maxsize=None)  # noqa: B019
    def get(self, name: str) -> Script:
        client = redis()
        db = client.connection_pool.connection_kwargs.get("db", 0)
        parts = [f"-- seckill, database {db}", CORE_LIB.read_text()]
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
