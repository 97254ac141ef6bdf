"""The loader of a folder of Lua scripts, which every app's Redis module uses.

Each app keeps its key names and its scripts in one module of its own
(inventory.redis.keys, accounts.token_cache); each script is prefixed with
the shared Lua definitions (core/lua/_lib.lua, then the app's own _lib.lua),
loaded once as a redis-py Script object, and reloaded after a NOSCRIPT only
once its instance was checked (core.redis.instance).
"""
from __future__ import annotations

from functools import cache
from pathlib import Path

from redis import Redis
from redis.cluster import RedisCluster
from redis.exceptions import NoScriptError

from core.adapters.redis_py import Script, ScriptCall, script_load
from core.redis.calls import evalsha_together
from core.redis.connection import redis, script_scope
from core.redis.instance import checking, instance_check, load_on_every_check
from core.redis.keys import prefix
from core.redis.shards import shard_of

CORE_LIB = Path(__file__).resolve().parent.parent / "lua" / "_lib.lua"


class GuardedScript(ScriptCall):
    """A redis-py Script whose reload after NOSCRIPT waits for `instance_check`
    (of the shard that answered it)."""

    def run(self, client, keys: list, args: list):
        reply = evalsha_together(client, [("EVALSHA", self.sha, len(keys), *keys, *args)])[0]
        if isinstance(reply, NoScriptError):
            self.reload(client, keys[0] if keys else "")
            reply = evalsha_together(client, [("EVALSHA", self.sha, len(keys), *keys, *args)])[0]
        if isinstance(reply, Exception):
            raise reply
        return reply

    def reload(self, client: Redis | RedisCluster, key_name: str) -> None:
        shard = shard_of(client, key_name)
        if not checking():
            instance_check(shard)
        script_load(self, shard.client)


class Scripts:
    """The scripts of one folder. `get(name)` is the Script for `<name>.lua`;
    its `.sha` is known without a round trip, so a hot path can pipeline it.
    The text names the prefix and the database, so each database and prefix
    sharing a server meets its own NOSCRIPT after a restart (and is checked).
    A script is called through its layout (core.lua_layout), which also says
    what it answers."""

    def __init__(self, folder: Path):
        self.folder = folder
        load_on_every_check(self)

    def load_all(self, client: Redis) -> None:
        for path in sorted(self.folder.glob("*.lua")):
            if not path.name.startswith("_"):
                script_load(self.get(path.stem), client)

    # One Scripts per app for the process's life: the cache holding `self` leaks nothing.
    @cache  # noqa: B019
    def get(self, name: str) -> Script:
        client = redis()
        parts = [f"-- seckill, {prefix()}, {script_scope(client)}", CORE_LIB.read_text()]
        own = self.folder / "_lib.lua"
        if own.exists():
            parts.append(own.read_text())
        parts.append((self.folder / f"{name}.lua").read_text())
        return GuardedScript(client, "\n".join(parts))

    def __hash__(self) -> int:
        return hash(self.folder)
