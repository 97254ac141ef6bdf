"""The Redis connection and the Lua script loader every app's Redis module uses.

Each app keeps its key names and its scripts in one module of its own
(inventory.redis_store, accounts.token_cache); what they share is here: the
connection (django-redis) and the loading of a folder of scripts, each prefixed
with the shared Lua definitions (core/lua/_lib.lua, then the app's own
_lib.lua), as redis-py Script objects loaded once.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from django_redis import get_redis_connection
from redis import Redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError, RedisError  # noqa: F401  (re-exported)

CORE_LIB = Path(__file__).resolve().parent / "lua" / "_lib.lua"


def redis() -> Redis:
    return get_redis_connection("default")


class Scripts:
    """The scripts of one folder. `get(name)` is the Script for `<name>.lua`;
    its `.sha` is known without a round trip, so a hot path can pipeline it."""

    def __init__(self, folder: Path):
        self.folder = folder

    @lru_cache(maxsize=None)
    def get(self, name: str) -> Script:
        parts = [CORE_LIB.read_text()]
        own = self.folder / "_lib.lua"
        if own.exists():
            parts.append(own.read_text())
        parts.append((self.folder / f"{name}.lua").read_text())
        return redis().register_script("\n".join(parts))

    def __hash__(self) -> int:
        return hash(self.folder)


def text(v: str | bytes) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class Call:
    """One script call that can ride in a pipeline with calls of other modules
    (each in its own Cluster slot): `run_together` sends them in one round trip."""

    def __init__(self, script: Script, keys: list, args: list):
        self.script, self.keys, self.args = script, keys, args

    def queue(self, pipe) -> None:
        pipe.evalsha(self.script.sha, len(self.keys), *self.keys, *self.args)

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
    pipe = redis().pipeline(transaction=False)
    for call in calls:
        call.queue(pipe)
    return [call.settle(raw) for call, raw in zip(calls, pipe.execute(raise_on_error=False))]
