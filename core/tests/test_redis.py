"""core.redis against the real Redis. Script calls, made on a lower layer than
redis-py's client, keep what the client gave them: a connection the server
closed (a restart, a timeout) is made again before the call, a script's error
reply comes back as that error and leaves the connection usable, and calls
sent together are answered in their order. And a failure tells by its type
whether the call surely did not run: a connect that failed does (NotSent), a
connection cut mid-reply never does."""
from __future__ import annotations

import socket
import threading
import uuid

import pytest
from django.conf import settings
from redis import ConnectionPool, Redis
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError, ResponseError, TimeoutError as RedisTimeoutError

from core.redis.calls import Call, evalsha_together, run_together
from core.redis.connection import clustered, redis
from core.redis.errors import ClusterCallError, NotSent
from core.redis.keys import tagged
from core.redis.lines import evalsha_on_one
from core.redis.scripts import GuardedScript
from core.redis.shards import shard_of
from core.retry import is_transient
from testsupport import wait_until


def echo_script() -> GuardedScript:
    # New text each test: its first call meets NOSCRIPT and loads it, as after a deploy.
    return GuardedScript(redis(), f"-- core.redis test {uuid.uuid4().hex}\nreturn ARGV[1]")


def close_connections_from_the_server() -> None:
    """What a Redis restart does to a client: every connection to this run's
    database (the tests' own) is closed by the server, this one's aside."""
    r = redis()
    db = r.connection_pool.connection_kwargs.get("db", 0)
    own = r.client_id()
    for client in r.client_list():
        if int(client.get("db", -1)) == db and int(client["id"]) != own:
            r.client_kill_filter(_id=client["id"])


def test_a_connection_the_server_closed_is_made_again_before_the_call():
    echo = echo_script()
    assert echo(args=["a"]) == b"a"
    assert run_together(Call(echo, [], ["b"]), Call(echo, [], ["c"])) == [b"b", b"c"]
    close_connections_from_the_server()
    assert echo(args=["d"]) == b"d"
    close_connections_from_the_server()
    assert run_together(Call(echo, [], ["e"]), Call(echo, [], ["f"])) == [b"e", b"f"]


def test_a_script_error_is_raised_and_the_next_call_is_answered():
    echo = echo_script()
    refuse = GuardedScript(redis(), f"-- core.redis test {uuid.uuid4().hex}\n"
                                    "return redis.error_reply('ERR refused by the test')")
    echo(args=["warm"])  # both loaded: the errors below are the script's, not NOSCRIPT
    with pytest.raises(ResponseError, match="refused by the test"):
        refuse()
    assert echo(args=["after"]) == b"after"
    with pytest.raises(ResponseError, match="refused by the test"):
        run_together(Call(refuse, [], []), Call(echo, [], ["beside"]))
    # and the calls after it are answered in their order
    assert run_together(Call(echo, [], ["x"]), Call(echo, [], ["y"])) == [b"x", b"y"]


# --- A call that surely did not run is told by its type ------------------------------------
# orders.services.place forgets a reservation whose call never reached Redis,
# and undoes one whose call may have run: NotSent must be raised for the first
# and never for the second.

single_redis = pytest.mark.skipif(clustered(), reason="the one Redis's pool (the cluster's: below)")
cluster_only = pytest.mark.skipif(not clustered(), reason="REDIS_URL names one Redis, not a Redis Cluster")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def like_the_projects(**changed) -> Redis:
    """A client on a pool made as the project's (django-redis's, from the
    settings), with some connection settings changed."""
    pool = redis().connection_pool
    return Redis(connection_pool=type(pool)(connection_class=pool.connection_class,
                                            **{**pool.connection_kwargs, **changed}))


def spin_script(client: Redis, ms: int) -> str:
    """A script that keeps Redis busy `ms` milliseconds (loaded on `client`'s node)."""
    return client.script_load(f"-- core.redis test {uuid.uuid4().hex}\n"
                              "local t = redis.call('TIME'); local until_us = t[1] * 1e6 + t[2] + ARGV[1] * 1000\n"
                              "repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] >= until_us\nreturn 1")


@single_redis
def test_a_call_whose_connection_could_not_be_made_is_not_sent():
    closed = like_the_projects(port=closed_port())
    with pytest.raises(NotSent) as plain:
        closed.get("seckill-test:anything")  # the pool's own connect
    with pytest.raises(NotSent) as script:
        evalsha_together(closed, [("EVALSHA", "0" * 40, 0, "a")])  # core.redis.lines' connections
    assert "connecting to" in str(plain.value)  # redis-py's words kept for the logs
    assert is_transient(plain.value) and is_transient(script.value)  # still a store away, waited out


def test_a_script_call_on_a_connection_of_any_pool_is_not_sent_when_it_cannot_connect():
    # The cluster's node pools make redis-py's own connections (without
    # retries, as here): the script calls' connections are NotSent all the same.
    closed = Redis(connection_pool=ConnectionPool(host="127.0.0.1", port=closed_port()))
    with pytest.raises(NotSent):
        evalsha_on_one(closed, [("EVALSHA", "0" * 40, 0, "a")])


@single_redis
def test_a_connection_cut_mid_reply_may_have_run():
    name = f"seckill-test-{uuid.uuid4().hex[:8]}"
    blocked, caught = like_the_projects(client_name=name), []

    def wait() -> None:
        try:
            blocked.blpop([f"seckill-test:{name}"], timeout=1)
        except Exception as exc:
            caught.append(exc)

    waiting = threading.Thread(target=wait)
    waiting.start()
    wait_until(lambda: any(c.get("name") == name and c.get("cmd") == "blpop" for c in redis().client_list()),
               timeout=5, interval=0.01, what="the BLPOP under way")
    redis().client_kill_filter(_id=next(c["id"] for c in redis().client_list() if c.get("name") == name))
    waiting.join(5)
    assert len(caught) == 1 and isinstance(caught[0], RedisConnectionError), caught
    assert not isinstance(caught[0], NotSent)

    slow = like_the_projects(socket_timeout=0.1)  # the script runs on past the read's timeout
    sha = spin_script(slow, 300)
    with pytest.raises(RedisTimeoutError) as timed_out:
        evalsha_together(slow, [("EVALSHA", sha, 0, 300)])
    assert not isinstance(timed_out.value, NotSent)


def fresh_cluster(**changed) -> RedisCluster:
    return RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in settings.REDIS_CLUSTER_NODES],
                        require_full_coverage=False, username=settings.REDIS_CLUSTER_USERNAME,
                        password=settings.REDIS_CLUSTER_PASSWORD, **changed)


@pytest.mark.redis_cluster
@cluster_only
def test_a_cluster_call_no_part_of_which_was_sent_is_not_sent(monkeypatch):
    client = fresh_cluster(socket_connect_timeout=0.2)
    dead = ClusterNode("127.0.0.1", closed_port())
    monkeypatch.setattr(client, "get_node_from_key", lambda key_name: dead)  # the slot's node no longer listens
    with pytest.raises(NotSent):
        evalsha_together(client, [("EVALSHA", "0" * 40, 1, "seckill-test:{a}:x")])


@pytest.mark.redis_cluster
@cluster_only
def test_a_cluster_call_cut_mid_reply_may_have_run():
    client = fresh_cluster(socket_timeout=0.2)
    name = f"{tagged('test')}:{uuid.uuid4().hex}"
    sha = spin_script(shard_of(client, name).client, 600)
    with pytest.raises(ClusterCallError) as cut:
        evalsha_together(client, [("EVALSHA", sha, 1, name, 600)])
    assert not isinstance(cut.value, NotSent)
