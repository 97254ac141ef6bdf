"""core/adapters and seckill_site/adapters: each library's internals in one
module, written for stated versions. Each adapter refuses at import a version it
was not written for, accepts the one requirements.txt pins, and the private
names it uses are still there on the installed library, so an upgrade that
moves one fails here and not in a launch. What the adapters do is tested where
it matters: test_web_server.py (granian), test_broker.py (Celery), test_wsgi.py
(Django), test_redis.py and the Redis suites (redis-py), and below."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import inspect
import re
from pathlib import Path

import pytest
from django.conf import settings

from core import adapters
from core.adapters import redis_py as redis_adapter
from seckill_site.adapters import celery as celery_adapter, django as django_adapter, granian as granian_adapter

ROOT = Path(__file__).resolve().parents[2]
ADAPTERS = {"granian": granian_adapter, "celery": celery_adapter, "django": django_adapter,
            "redis_py": redis_adapter}
EVERY_LIBRARY = [(name, dist) for name, module in ADAPTERS.items() for dist in module.WRITTEN_FOR]


def path_of(name: str) -> str:
    return Path(ADAPTERS[name].__file__).resolve().relative_to(ROOT).as_posix()


def fresh(name: str):
    """The adapter's module run again from its file, as an import would run it
    (sys.modules keeps the one the project uses)."""
    spec = importlib.util.find_spec(ADAPTERS[name].__name__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pins() -> dict[str, str]:
    found = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        m = re.match(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==(\S+)", line.strip())
        if m:
            found[m.group(1).lower()] = m.group(2)
    return found


@pytest.mark.parametrize(("name", "distribution"), EVERY_LIBRARY)
def test_an_adapter_refuses_at_import_a_version_it_was_not_written_for(monkeypatch, name, distribution):
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda dist: "99.0.1" if dist.lower() == distribution.lower() else real(dist))
    with pytest.raises(adapters.UnknownVersion) as refused:
        fresh(name)
    message = str(refused.value)
    assert f"{distribution} 99.0.1 is installed" in message
    assert path_of(name) in message  # the file to review
    assert "WRITTEN_FOR" in message


@pytest.mark.parametrize(("name", "distribution"), EVERY_LIBRARY)
def test_an_adapter_is_written_for_the_version_requirements_txt_pins(name, distribution):
    pinned = pins()[distribution.lower()]
    assert pinned in ADAPTERS[name].WRITTEN_FOR[distribution], (
        f"requirements.txt pins {distribution} {pinned}: review {path_of(name)} for it")
    assert importlib.metadata.version(distribution) == pinned  # the environment is the pinned one
    assert fresh(name).WRITTEN_FOR == ADAPTERS[name].WRITTEN_FOR  # and the import accepts it


# The names only an adapter may use; anywhere else in the code they are
# another library's internals out of sight of these tests.
PRIVATE_NAMES = ["_respawn_workers", "_init_shared_socket", "respawned_wrks", "granian._internal",
                 '"_granian"', "_producer_pool", "._pool", "DelayedDelivery", "delayed_delivery",
                 "settings.MIDDLEWARE =",
                 # redis-py
                 "nodes_manager", "slots_cache", "move_node_to_end_of_cached_nodes", "ClusterPipeline",
                 "__class__ =", "pack_commands", "send_packed_command", "read_response", "can_read",
                 "is_connected", "connect_check_health", "connection_kwargs", ".connection_class",
                 "registered_client", "redis.crc", "redis.commands"]


def test_no_module_outside_the_adapters_uses_their_private_names():
    skipped = {".venv", "var", "tests", "adapters", "node_modules"}
    found = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if skipped & set(rel.parts):
            continue
        text = path.read_text()
        found += [f"{rel}: {name}" for name in PRIVATE_NAMES if name in text]
    assert not found, found


# --- granian -------------------------------------------------------------------

def _server(port: int = 0):
    return granian_adapter.Server("os.path:join", address="127.0.0.1", port=port, workers=1)


def test_granian_still_has_what_the_server_adapter_replaces_and_reads():
    from granian.server.common import AbstractServer
    from granian.server.mp import MPServer, WorkerProcess

    assert list(inspect.signature(MPServer._respawn_workers).parameters) == [
        "self", "workers", "spawn_target", "target_loader", "delay"]
    assert list(inspect.signature(MPServer._init_shared_socket).parameters) == ["self"]
    server = _server()
    assert isinstance(server.respawned_wrks, dict) and isinstance(server.wrks, list)
    assert (server.bind_addr, server.bind_port, server.backlog) == ("127.0.0.1", 0, 1024)
    # its crash-loop exit reads the record the adapter clears
    assert "self.respawned_wrks" in inspect.getsource(AbstractServer._serve_loop)
    # each worker is handed the socket the adapter opens, and a worker's process is .inner
    assert "self._sso" in inspect.getsource(MPServer._spawn_worker)
    assert WorkerProcess(parent=server, idx=0, target=print, args=()).inner.pid is None
    # the logger the launcher writes to is granian's own, and so is the warning it drops
    from granian.log import logger

    assert granian_adapter.logger is logger
    assert granian_adapter.THREAD_COUNT_NOTICE in inspect.getsource(MPServer.serve)


def test_the_granian_server_binds_one_inheritable_socket_for_its_workers_and_granian_closes_it():
    import os

    server = _server()
    server._init_shared_socket()
    try:
        assert server._ssp is None  # no per-worker socket to build (granian's Linux default)
        assert server._sso.fileno() == server._sfd and os.get_inheritable(server._sfd)
        assert server._sso.getsockname()[0] == "127.0.0.1" and server._sso.getsockname()[1] > 0
    finally:
        server._drop_shared_socket()  # granian's own, reading the attribute by its name
    assert server._sso is None


def test_a_granian_replacement_is_heard_of_and_never_counted_towards_granians_crash_loop(monkeypatch):
    from granian.server.common import AbstractServer

    heard, replaced = [], []
    server = _server()

    def respawn(self, workers, spawn_target, target_loader, delay=0):
        replaced.extend(workers)
        self.respawned_wrks.update(dict.fromkeys(workers, 1.0))

    monkeypatch.setattr(AbstractServer, "_respawn_workers", respawn)  # granian's: it starts processes
    monkeypatch.setattr(server, "worker_replacing", lambda idx, pid: heard.append((idx, pid)))
    server._respawn_workers([0], None, None)
    assert heard == [(0, None)] and replaced == [0]  # no worker started yet: no pid
    assert server.respawned_wrks == {}


def test_granians_loader_gives_the_callable_named():
    import os.path

    assert granian_adapter.load_target("os.path:join") is os.path.join


# --- Celery --------------------------------------------------------------------

def test_celery_still_has_the_step_and_the_pools_the_adapter_drops():
    from celery import Celery
    from celery.worker.consumer import Consumer

    assert celery_adapter.DELAYED_DELIVERY_STEP in Consumer.Blueprint.default_steps
    assert celery_adapter.DELAYED_DELIVERY_STEP not in celery_adapter.TaskConsumer.Blueprint.default_steps
    assert len(celery_adapter.TaskConsumer.Blueprint.default_steps) == len(Consumer.Blueprint.default_steps) - 1
    app = Celery("adapter-probe", broker="amqp://guest:guest@127.0.0.1:5672//", set_as_current=False)
    pool, producers = app.pool, app.producer_pool  # lazy: nothing connects
    assert app._pool is pool and app.amqp._producer_pool is producers
    celery_adapter.broker_pools_forget(app)
    assert app.pool is not pool and app.producer_pool is not producers


def test_a_celery_without_the_delayed_delivery_step_is_refused_at_import(monkeypatch):
    from celery.worker.consumer import Consumer

    steps = [s for s in Consumer.Blueprint.default_steps if s != celery_adapter.DELAYED_DELIVERY_STEP]
    monkeypatch.setattr(Consumer.Blueprint, "default_steps", steps)
    with pytest.raises(RuntimeError, match="has no step celery.worker.consumer.delayed_delivery"):
        fresh("celery")


def test_a_refused_publish_is_told_from_other_failures_raised_or_wrapped_by_kombu():
    from amqp.exceptions import MessageNacked
    from kombu.exceptions import OperationalError

    assert celery_adapter.is_refused_publish(MessageNacked())
    wrapped = OperationalError("refused")
    wrapped.__cause__ = MessageNacked()  # as `raise ... from` leaves it
    assert celery_adapter.is_refused_publish(wrapped)
    assert not celery_adapter.is_refused_publish(OperationalError("connection refused"))
    assert not celery_adapter.is_refused_publish(ConnectionError())


# --- Django --------------------------------------------------------------------

def test_django_still_builds_a_handlers_chain_from_the_setting_once():
    from django.core.handlers.base import BaseHandler
    from django.core.handlers.wsgi import WSGIHandler

    assert list(inspect.signature(BaseHandler.load_middleware).parameters) == ["self", "is_async"]
    assert "settings.MIDDLEWARE" in inspect.getsource(BaseHandler.load_middleware)
    assert "self.load_middleware()" in inspect.getsource(WSGIHandler.__init__)


def test_a_handler_runs_the_chain_it_was_given_and_the_setting_is_left_as_it_was():
    from wsgiref.util import setup_testing_defaults

    site_chain = list(settings.MIDDLEWARE)
    assert "django.middleware.security.SecurityMiddleware" in site_chain
    handler = django_adapter.MiddlewareChainHandler(["django.middleware.clickjacking.XFrameOptionsMiddleware"])
    assert site_chain == settings.MIDDLEWARE
    environ = {"PATH_INFO": "/no-such-page/", "REQUEST_METHOD": "GET", "HTTP_HOST": "localhost"}
    setup_testing_defaults(environ)
    seen = {}
    # The start and the end of a request close stale connections, which asks a
    # connection an earlier test opened for its autocommit: a database access this
    # test is not allowed. Django's own test client steps the same signals aside.
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        response = handler(environ, lambda status, headers, exc_info=None: seen.update(status=status,
                                                                                      headers=dict(headers)))
        response.close()
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)
    assert seen["status"].startswith("404")
    assert seen["headers"].get("X-Frame-Options") == "DENY"  # the chain given ran
    assert "X-Content-Type-Options" not in seen["headers"]  # the site's SecurityMiddleware did not


# --- redis-py --------------------------------------------------------------------

def test_redis_py_still_has_what_the_adapter_reaches_below_its_client():
    from redis.cluster import ClusterPipeline, NodesManager, RedisCluster
    from redis.commands.core import Script
    from redis.connection import AbstractConnection, Connection, ConnectionPool
    from redis.crc import key_slot

    for name in ("pack_commands", "send_packed_command", "read_response", "can_read", "connect", "disconnect"):
        assert callable(getattr(Connection, name)), name
    assert isinstance(inspect.getattr_static(AbstractConnection, "is_connected"), property)
    # connect() is where a connection is made; a send reconnects around it (ConnectFailure)
    assert "self.connect_check_health(" in inspect.getsource(AbstractConnection.connect)
    send = inspect.getsource(AbstractConnection.send_packed_command)
    assert "self.connect_check_health(" in send and "self.connect()" not in send
    pool = ConnectionPool(host="127.0.0.1", port=1, db=3)
    assert pool.connection_class is Connection and pool.connection_kwargs["db"] == 3
    # the cluster client's layout, and the pipeline it builds itself
    assert "slots_cache" in inspect.getsource(NodesManager.initialize)
    assert "last_failed_node_name" in inspect.signature(NodesManager.initialize).parameters
    assert list(inspect.signature(NodesManager.move_node_to_end_of_cached_nodes).parameters) == ["self", "node_name"]
    assert "return ClusterPipeline(" in inspect.getsource(RedisCluster.pipeline)
    assert "raise_on_error" in inspect.signature(ClusterPipeline.execute).parameters
    probe = object.__new__(ClusterPipeline)
    probe.__class__, probe.failure = redis_adapter._Pipeline, None  # an instance takes the adapter's class
    # Script: its attributes, and the call the adapter replaces
    assert list(inspect.signature(Script.__init__).parameters) == ["self", "registered_client", "script"]
    assert list(inspect.signature(Script.__call__).parameters) == ["self", "keys", "args", "client"]
    assert key_slot(b"foo") == 12182 and key_slot(b"{foo}bar") == 12182  # CRC16 mod 16384, hash tags


def _single_redis():
    from core.redis.connection import clustered, redis

    if clustered():
        pytest.skip("REDIS_URL names a Redis Cluster")
    return redis()


def test_a_connection_of_the_clients_settings_sends_in_one_write_and_is_made_again_once_the_server_closed_it():
    client = _single_redis()
    conn = redis_adapter.connection_new(client, lambda cls: cls)
    assert redis_adapter.connection_settings(client)["db"] == conn.db
    redis_adapter.connection_ready(conn)
    redis_adapter.commands_send(conn, [("CLIENT", "ID"), ("ECHO", "one write")])
    own_id, echoed = redis_adapter.reply_read(conn), redis_adapter.reply_read(conn)
    assert echoed == b"one write"
    assert client.client_kill_filter(_id=own_id) == 1  # the server closes it
    redis_adapter.connection_ready(conn)  # told by can_read: connected again
    redis_adapter.commands_send(conn, [("ECHO", "again")])
    assert redis_adapter.reply_read(conn) == b"again"
    redis_adapter.connection_drop(conn)
    assert not conn.is_connected


def test_a_connect_failure_is_replaced_but_a_reconnect_on_a_send_passes_around_it():
    import socket

    from redis.connection import Connection
    from redis.exceptions import ConnectionError as RedisConnectionError

    class Refused(LookupError):
        pass

    class Failing(redis_adapter.ConnectFailure, Connection):
        def connect_failed(self, exc):
            return Refused(str(exc))

    class Kept(redis_adapter.ConnectFailure, Connection):
        def connect_failed(self, exc):
            return None

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    with pytest.raises(Refused) as refused:
        Failing(host="127.0.0.1", port=port).connect()
    assert isinstance(refused.value.__cause__, RedisConnectionError)
    with pytest.raises(RedisConnectionError):
        Kept(host="127.0.0.1", port=port).connect()
    with pytest.raises(RedisConnectionError):  # redis-py's own reconnect: not through connect()
        Failing(host="127.0.0.1", port=port).send_packed_command(b"PING\r\n")


def test_a_script_call_goes_to_the_subclass_with_its_registered_client_and_a_load_sets_its_sha():
    import hashlib

    client = _single_redis()
    seen = []

    class Recorded(redis_adapter.ScriptCall):
        def run(self, client, keys, args):
            seen.append((client, keys, args))
            return "ran"

    script = Recorded(client, "return 7")
    assert script(keys=("k",), args=(1,)) == "ran" and seen == [(client, ["k"], [1])]
    assert script(client="other") == "ran" and seen[-1] == ("other", [], [])
    script.sha = "0" * 40
    redis_adapter.script_load(script, client)
    assert script.sha == hashlib.sha1(b"return 7").hexdigest()


def test_a_cluster_clients_failures_and_its_pipelines_are_the_subclasss_error():
    from redis.cluster import RedisCluster
    from redis.exceptions import RedisClusterException

    class Failed(Exception):
        pass

    class Client(redis_adapter.ClusterClient):
        def failure(self, exc):
            return Failed(str(exc))

    client = object.__new__(Client)  # no cluster to reach: only the class's own methods run
    pipe = object.__new__(redis_adapter._Pipeline)
    pipe.failure = client.failure

    def refused(*args, **kwargs):
        raise RedisClusterException("no node serves the slot")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RedisCluster, "execute_command", refused)
        mp.setattr(redis_adapter.ClusterPipeline, "execute", refused)
        with pytest.raises(Failed, match="no node serves the slot"):
            client.execute_command("GET", "k")
        with pytest.raises(Failed, match="no node serves the slot"):
            pipe.execute()


def test_the_adapters_import_no_project_module_but_their_own_package():
    """An adapter knows its library and nothing of the project: what it
    relies on is all in its own file."""
    import ast

    project = {"core", "accounts", "inventory", "orders", "reconciliation", "seckill_site", "testsupport"}
    offenders = []
    for path in [*(ROOT / "seckill_site" / "adapters").glob("*.py"), *(ROOT / "core" / "adapters").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names
                          if n.split(".")[0] in project and n != "core.adapters"]
    assert not offenders, offenders
