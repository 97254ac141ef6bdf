"""The fault matrix's hands on the local clusters' nodes: the runner's own view
of each cluster (benchmarks.clusters: its ports, pid files, up), and what the
faults need beside it: who serves a slot, who leads a queue, who consumes it,
and killing, pausing and failing over a node."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable

import redis

from benchmarks.clusters import ClusterError, GaleraCluster, RabbitCluster, RedisCluster
from benchmarks.clusters.nodes import alive

PAUSE_S = 8.0  # redis-master-pause: longer than the node timeout, so a replica is promoted meanwhile
# mariadb-node-pause: longer than the front's check gives a paused node (about
# 2.5 s) and than the group's suspect timeout (5 s): the front moves and the
# others carry on as two before the node resumes.
DB_PAUSE_S = 8.0


def _wait(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise RuntimeError(f"{what} not back within {timeout:.0f} s")


class _Quiet:
    """The runner's log kept, not printed (the matrix's table has the terminal),
    and handed back with an error when a heal fails."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, message: str) -> None:
        self.lines = (self.lines + [message])[-20:]


def _heal(up: Callable[[], None], quiet: _Quiet, what: str) -> None:
    try:
        up()
    except ClusterError as exc:
        raise RuntimeError(f"{what} failed: {exc}; {' | '.join(quiet.lines)}"[-800:]) from None


class RedisNodes(RedisCluster):
    """The Redis Cluster on `base`, whose masters the cluster faults kill, pause and fail over."""

    def __init__(self, base: int = 7000):
        self._quiet = _Quiet()
        super().__init__(base, say=self._quiet)
        self._password: str | None = None  # read once, on the first question to a node

    def up(self) -> None:
        """The Redis half of `bash scripts/cluster up`: every node running (a killed
        one restarted from its files rejoins as a replica, a paused one is
        resumed), every slot served by a writable master, every replica in sync."""
        _heal(super().up, self._quiet, f"the Redis Cluster's up (base {self.base})")

    def _node(self, port: int) -> redis.Redis:
        if self._password is None:
            self._password = self.password()
        return redis.Redis(host="127.0.0.1", port=port, password=self._password, socket_timeout=1.0,
                           socket_connect_timeout=0.5)

    def _ask(self, port: int, *command):
        node = self._node(port)
        try:
            return node.execute_command(*command)
        finally:
            node.close()

    def layout(self, skip: tuple[int, ...] = ()) -> list[tuple[int, int, int]]:
        """(first slot, last slot, master port) of each range, by slot, in the
        view of the first node that answers (`skip`: nodes not to ask); [] when none does."""
        for port in self.ports:
            if port in skip or self.pid(port) is None:
                continue
            try:
                ranges = self._ask(port, "CLUSTER", "SLOTS")
            except redis.RedisError:
                continue
            return sorted((int(start), int(end), int(master[1])) for start, end, master, *_ in ranges)
        return []

    def slot_master(self, slot: int, skip: tuple[int, ...] = ()) -> int | None:
        """The port of the master serving `slot` (see `layout`)."""
        return next((port for start, end, port in self.layout(skip) if start <= slot <= end), None)

    def _replication(self, port: int) -> dict:
        node = self._node(port)
        try:
            return node.info("replication")
        finally:
            node.close()

    def synced_replica(self, master: int) -> int:
        """A replica of `master` that is online with its link up (CLUSTER FAILOVER
        itself waits until it has caught up the master's offset)."""
        info = self._replication(master)
        for i in range(int(info.get("connected_slaves", 0))):
            entry = info.get(f"slave{i}") or {}
            port = int(entry.get("port", 0))
            if entry.get("state") == "online" and port in self.ports:
                mine = self._replication(port)
                if mine.get("master_link_status") == "up" and mine.get("master_port") == master:
                    return port
        raise RuntimeError(f"no synced replica of {master}")

    def kill(self, port: int) -> None:
        """SIGKILL: the process goes at once, its append-only file stays."""
        pid = self.pid(port)
        if pid is None:
            raise RuntimeError(f"no node running on {port}")
        os.kill(pid, signal.SIGKILL)
        _wait(lambda: self.pid(port) is None, 10, f"node {port} to die")

    def signal(self, port: int, sig: signal.Signals) -> None:
        """SIGSTOP / SIGCONT: a paused node keeps its connections and answers nothing."""
        pid = self.pid(port)
        if pid is None:
            raise RuntimeError(f"no node running on {port}")
        os.kill(pid, sig)

    def wait_promoted(self, slot: int, old: int, timeout: float = 30) -> int:
        """Until a node other than `old` serves `slot` as a master (its own
        word: the others may still name `old`); returns its port."""
        found: list[int] = []

        def promoted() -> bool:
            for port in self.ports:
                if port == old or self.pid(port) is None:
                    continue
                try:
                    owner = self.slot_master(slot, skip=tuple(p for p in self.ports if p != port))
                    if owner == port and self._replication(port).get("role") == "master":
                        found[:] = [port]
                        return True
                except redis.RedisError:
                    continue
            return False

        _wait(promoted, timeout, f"a replica of {old} promoted")
        return found[0]

    def failover(self, replica: int, timeout: float = 30) -> None:
        """CLUSTER FAILOVER on a replica (a planned handover: the master stops
        its clients, the replica catches up, then takes over); waits until the
        replica is a master."""
        self._ask(replica, "CLUSTER", "FAILOVER")
        _wait(lambda: self._replication(replica).get("role") == "master", timeout, f"{replica} to take over")


_NODE_PORT = re.compile(r"seckill-(\d+)@")


class RabbitNodes(RabbitCluster):
    """The RabbitMQ cluster on `base`, whose nodes the host faults kill and restart."""

    def __init__(self, base: int = 5687):
        self._quiet = _Quiet()
        super().__init__(base, say=self._quiet)

    def up(self) -> None:
        """Every node running and clustered (a killed or stopped node started
        again rejoins), every quorum queue grown to a replica on every node."""
        _heal(super().up, self._quiet, f"the RabbitMQ cluster's up (base {self.base})")

    def _ask(self, *args: str) -> list[dict]:
        """A rabbitmqctl listing (JSON) from the first running node that answers."""
        errors = []
        for port in self.running():
            try:
                return json.loads(self.ctl(port, "rabbitmqctl", *args, "--formatter", "json", timeout=90).stdout
                                  or "[]")
            except (ClusterError, ValueError, subprocess.TimeoutExpired) as exc:
                errors.append(str(exc))
        raise RuntimeError(f"no RabbitMQ node of {self.base} answered {args[0]}: {'; '.join(errors)[-400:]}")

    @staticmethod
    def node_port(name: str) -> int | None:
        """The port of a node named seckill-<port>@localhost (or a pid/name that holds it)."""
        m = _NODE_PORT.search(name or "")
        return int(m.group(1)) if m else None

    def leader(self, queue: str) -> int:
        """The port of the node holding `queue`'s leader (a quorum queue), as a live node sees it."""
        for q in self._ask("list_queues", "-p", "/", "name", "leader"):
            if q.get("name") == queue:
                port = self.node_port(str(q.get("leader")))
                if port in self.ports:
                    return port
                raise RuntimeError(f"queue {queue} has no leader on a node of {self.base}: {q}")
        raise RuntimeError(f"no queue {queue} on the cluster {self.base}")

    def consumers(self, queue: str, workers: list[str] = ()) -> list[dict]:
        """[{"tag": consumer tag, "active": bool, "node": port of its connection,
        "worker": the one of `workers` (Celery node names) the tag begins with,
        else None}] of `queue`. (The confirm consumer's tag is the worker's name,
        its partition's mark, "/", then kombu's own part.)"""
        out = []
        for c in self._ask("list_consumers", "-p", "/", "queue_name", "channel_pid", "consumer_tag", "active"):
            if c.get("queue_name") != queue:
                continue
            tag = str(c.get("consumer_tag"))
            owner = tag.split("/", 1)[0]
            worker = next((w for w in workers if owner == w or owner.startswith(w + "#")), None)
            out.append({"tag": tag, "active": c.get("active") in (True, "true"), "worker": worker,
                        "node": self.node_port(str(c.get("channel_pid")))})
        return out

    def kill(self, port: int) -> None:
        """SIGKILL of the node: its connections drop, its replicas go with it."""
        pid = self.pid(port)
        if pid is None:
            raise RuntimeError(f"no RabbitMQ node running on {port}")
        os.kill(pid, signal.SIGKILL)
        _wait(lambda: not alive(pid), 15, f"RabbitMQ node {port} to die")

    def stop(self, port: int) -> None:
        """A clean stop of the whole node (rabbitmqctl shutdown: it hands its
        queue leaders over, closes its connections, waits until the node exited)."""
        pid = self.pid(port)
        if pid is None:
            raise RuntimeError(f"no RabbitMQ node running on {port}")
        self.ctl(port, "rabbitmqctl", "shutdown", timeout=120)
        _wait(lambda: not alive(pid), 60, f"RabbitMQ node {port} to stop")


class GaleraNodes(GaleraCluster):
    """The Galera cluster on `base` (its front on base+3), whose writer the
    database faults kill, pause and restart, and whose three nodes they crash."""

    def __init__(self, base: int = 3331):
        self._quiet = _Quiet()
        super().__init__(base, say=self._quiet)

    def up(self) -> None:
        """Every node running and Synced in one primary component of three (a
        killed or stopped one started again rejoins by IST; all three crashed
        form their last component again), the front routing to one."""
        _heal(super().up, self._quiet, f"the MariaDB cluster's up (base {self.base})")

    def writer(self) -> int:
        """The node the front sends new connections to now."""
        port = self.front_node()
        if port is None:
            raise RuntimeError(f"the MariaDB front on {self.front} routes to no node")
        return port

    def running(self) -> list[int]:
        return [port for port in self.ports if self.pid(port) is not None]

    def crash_all(self, timeout: float = 30) -> None:
        """SIGKILL of every running node at once, then until each process is gone
        and its ports are closed (a killed mariadbd's leader thread turns zombie
        before the others are gone: a start meanwhile would find its port taken)."""
        from benchmarks.clusters.nodes import port_open

        pids = [pid for pid in map(self.pid, self.ports) if pid is not None]
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        ports = [p for port in self.ports for p in (port, self.gcomm_port(port), self.ist_port(port))]
        _wait(lambda: not any(alive(pid) for pid in pids) and not any(port_open(p) for p in ports), timeout,
              "the MariaDB nodes' ports closed")
