"""Script calls sent together: each EVALSHA of a call in one round trip (on a
cluster, one per node), and `Call`, one script call that can ride with the
calls of other modules (`run_together`)."""
from __future__ import annotations

from redis import Redis
from redis.cluster import RedisCluster
from redis.exceptions import NoScriptError

from core.adapters.redis_py import Script
from core.redis.cluster_calls import cluster_evalsha
from core.redis.connection import redis
from core.redis.lines import evalsha_on_one


def evalsha_together(client: Redis | RedisCluster, commands: list[tuple]) -> list:
    """Each ("EVALSHA", sha, numkeys, *keys, *args) in one round trip (on a
    cluster: one per node, all sent before any is read); the replies in
    order, a script's error reply (NOSCRIPT...) as its exception."""
    if isinstance(client, RedisCluster):
        return cluster_evalsha(client, commands)
    return evalsha_on_one(client, commands)


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
