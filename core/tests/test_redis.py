"""core.redis's script calls against the real Redis: script calls, made on a lower layer than
redis-py's client, keep what the client gave them. A connection the server
closed (a restart, a timeout) is made again before the call, a script's error
reply comes back as that error and leaves the connection usable, and calls
sent together are answered in their order."""
from __future__ import annotations

import uuid

import pytest
from redis.exceptions import ResponseError

from core.redis.calls import Call, run_together
from core.redis.connection import redis
from core.redis.scripts import GuardedScript


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
