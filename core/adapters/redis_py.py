"""redis-py below its client: what core/redis relies on that redis-py does not document.

Read against redis 8.1.0 (redis/connection.py, redis/cluster.py,
redis/commands/core.py, redis/crc.py):

- a connection's own layer, under the pool's checkout and the client's retry
  and callbacks: a connection made from a pool's `connection_class` and
  `connection_kwargs`; `is_connected`, `can_read()`, `connect()`,
  `disconnect()`, `pack_commands()`, `send_packed_command()`,
  `read_response()` (core.redis.lines, core.redis.cluster_calls);
- `connect()` as the call that makes a connection before anything is written
  on it, raising ConnectionError (TimeoutError) when it cannot, while
  redis-py's own reconnect on a send goes through `connect_check_health`
  instead (core.redis.connection: a failed connect says "nothing was sent");
- the cluster client's layout, `RedisCluster.nodes_manager`: its
  `slots_cache` (slot -> [primary, replicas...]), `initialize(last_failed_node_name=)`
  and `move_node_to_end_of_cached_nodes()`;
- `RedisCluster.pipeline()` building its `ClusterPipeline` itself, so the
  pipeline a subclass wants is had by swapping the instance's class;
- `Script`'s `registered_client`, `script` and `sha`, and its
  `__call__(keys, args, client)`, which a subclass replaces;
- `redis.crc.key_slot`, the slot of a key without a client.

Nothing else in the project names these (core/tests/test_adapters.py).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from core.adapters import require

WRITTEN_FOR = {"redis": ("8.1.0",)}
require(WRITTEN_FOR, __file__)  # before redis-py's modules: another version fails here, by name

from redis import Redis
from redis.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.commands.core import Script
from redis.crc import key_slot
from redis.exceptions import (
    ConnectionError as RedisConnectionError,
    RedisClusterException,
    TimeoutError as RedisTimeoutError,
)

__all__ = ["ClusterClient", "ConnectFailure", "Script", "ScriptCall", "key_slot"]


# --- a connection's own layer -----------------------------------------------------------

def connection_settings(client: Redis) -> dict:
    """The settings the client's pool makes its connections with (host, port, db, timeouts...)."""
    return client.connection_pool.connection_kwargs


def connection_new(client: Redis, wrap: Callable[[type], type]) -> object:
    """A connection of the client's pool's class, `wrap`ped, with the pool's
    settings; not connected yet."""
    pool = client.connection_pool
    return wrap(pool.connection_class)(**pool.connection_kwargs)


def connection_ready(conn) -> None:
    """Connected, with nothing unread, as the pool checks a connection it
    hands out: one the server closed (a restart) is made again."""
    if not conn.is_connected:
        conn.connect()
        return
    try:
        stale = conn.can_read()  # unread data, or the server closed it
    except (RedisConnectionError, RedisTimeoutError, OSError):
        stale = True
    if stale:
        conn.disconnect()
        conn.connect()


def commands_send(conn, commands: Sequence[tuple]) -> None:
    """Every command in one write."""
    conn.send_packed_command(conn.pack_commands(commands))


def reply_read(conn):
    """The next reply; a script's error reply raises ResponseError after it was read whole."""
    return conn.read_response()


def connection_drop(conn) -> None:
    conn.disconnect()


class ConnectFailure:
    """Mixed into a redis-py connection class: when `connect()` fails, the
    error `connect_failed(exc)` gives is raised in its place (None: the
    error as it is). connect() runs before anything is written on the
    connection, so its failure means nothing was sent; a reconnect on a send
    does not pass here."""

    def connect_failed(self, exc: Exception) -> Exception | None:
        raise NotImplementedError

    def connect(self) -> None:
        try:
            super().connect()
        except (RedisConnectionError, RedisTimeoutError) as exc:
            replaced = self.connect_failed(exc)
            if replaced is None:
                raise
            raise replaced from exc


# --- scripts ---------------------------------------------------------------------------------

class ScriptCall(Script):
    """A redis-py Script whose call is the subclass's `run(client, keys, args)`,
    `client` the one it was registered with unless one is given."""

    def __call__(self, keys=None, args=None, client=None):
        return self.run(client if client is not None else self.registered_client, list(keys or []), list(args or []))

    def run(self, client, keys: list, args: list):
        raise NotImplementedError


def script_load(script: Script, client: Redis) -> None:
    """SCRIPT LOAD on `client`; the script's `sha` is what the server answered."""
    script.sha = client.script_load(script.script)


# --- the cluster client ---------------------------------------------------------------------

def slots_table(client: RedisCluster) -> dict[int, list[ClusterNode]]:
    """Slot -> [its primary, then its replicas], as the client last read the
    layout. A new layout is a new dict: its identity tells a reader it changed."""
    return client.nodes_manager.slots_cache


def layout_read(client: RedisCluster, failed: Sequence[str] = ()) -> None:
    """Read the cluster's layout again from its nodes, the nodes in `failed`
    (names, "host:port") asked last. Raises when no node answers."""
    for name in failed:
        client.nodes_manager.move_node_to_end_of_cached_nodes(name)
    client.nodes_manager.initialize(last_failed_node_name=failed[-1] if failed else None)


class _Pipeline(ClusterPipeline):
    failure: Callable[[RedisClusterException], Exception]

    def execute(self, raise_on_error: bool = True):
        try:
            return super().execute(raise_on_error)
        except RedisClusterException as exc:
            raise self.failure(exc) from exc


class ClusterClient(RedisCluster):
    """RedisCluster whose commands and pipelines raise `failure(exc)` instead
    of a RedisClusterException (which is no RedisError); a subclass says what
    that failure is."""

    def failure(self, exc: RedisClusterException) -> Exception:
        raise NotImplementedError

    def execute_command(self, *args, **kwargs):
        try:
            return super().execute_command(*args, **kwargs)
        except RedisClusterException as exc:
            raise self.failure(exc) from exc

    def pipeline(self, transaction=None, shard_hint=None):
        pipe = super().pipeline(transaction, shard_hint)
        pipe.__class__ = _Pipeline
        pipe.failure = self.failure
        return pipe
