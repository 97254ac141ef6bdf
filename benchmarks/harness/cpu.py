"""CPU accounting: the CPU time each component used, counted process by
process, so a phase's CPU per request is each server's own."""
from __future__ import annotations

import os
import time
from pathlib import Path

from benchmarks.harness.processes import STARTED

# The shared servers this run does not start, found by their program name.
SYSTEM_GROUPS = {"mariadbd": "mariadb", "redis-server": "redis", "beam.smp": "rabbitmq"}


def proc_table() -> dict[int, tuple[int, str, float]]:
    """pid -> (parent pid, program name, CPU seconds of the process and of the
    children it has reaped), for every process in /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    table = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            raw = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        name, rest = raw[raw.index("(") + 1:raw.rindex(")")], raw.rsplit(")", 1)[1].split()
        # utime, stime, cutime, cstime: a worker that died and was reaped is in its parent's c-times
        table[int(pid)] = (int(rest[1]), name, sum(int(x) for x in rest[11:15]) / tick)
    return table


def tree(table: dict[int, tuple[int, str, float]], root: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in table and pid not in out:
            out.add(pid)
            todo.extend(kids.get(pid, ()))
    return out


class _RedisPids:
    def __init__(self) -> None:
        self.ports: set[int] | None = None  # the ports of this run's Redis servers, once known
        self.pids: dict[int, int] = {}  # pid -> port


_redis_pids = _RedisPids()


def _redis_ports() -> set[int]:
    """The ports of the Redis this run uses: the one server of REDIS_URL, or
    every node of the cluster (replicas too: replication is part of the cost)."""
    from core.adapters.redis_py import connection_settings
    from core.redis.connection import clustered, redis

    if clustered():
        return {node.port for node in redis().get_nodes()}
    return {int(connection_settings(redis()).get("port", 6379))}


def _our_redis(table: dict[int, tuple[int, str, float]]) -> dict[int, int] | None:
    """The pids of this run's Redis servers, told apart from the machine's
    other redis-server processes (several clusters may run beside the single
    Redis) by the port in their title ("redis-server 127.0.0.1:7000 [cluster]"),
    each with its port; None (count every redis-server) before Django is set
    up or when none is found."""
    if _redis_pids.pids and all(p in table for p in _redis_pids.pids):
        return _redis_pids.pids
    try:
        if _redis_pids.ports is None:
            _redis_pids.ports = _redis_ports()
    except Exception:  # Django not set up yet, a Redis not answering: count them all
        return None
    found = {}
    for pid, (_, name, _) in table.items():
        if name != "redis-server":
            continue
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        port = title.split()[1].rpartition(":")[2] if len(title.split()) > 1 else ""
        if port.isdigit() and int(port) in _redis_pids.ports:
            found[pid] = int(port)
    _redis_pids.pids = found
    return found or None


class _BrokerPids:
    def __init__(self) -> None:
        self.ports: set[int] | None = None  # the AMQP ports of this run's broker nodes, once known
        self.pids: set[int] = set()


_broker_pids = _BrokerPids()


def _broker_ports() -> set[int]:
    """The AMQP ports of the broker this run uses: every URL of
    CELERY_BROKER_URL (one node, or a cluster's nodes joined by ';')."""
    from urllib.parse import urlsplit

    from django.conf import settings

    return {urlsplit(url.strip()).port or 5672 for url in settings.CELERY_BROKER_URL.split(";") if url.strip()}


def _listening_inodes(ports: set[int]) -> set[str]:
    """The socket inodes listening on `ports` (any address, IPv4 or IPv6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == "0A" and int(f[1].rpartition(":")[2], 16) in ports:  # 0A: LISTEN
                found.add(f[9])
    return found


def _our_broker(table: dict[int, tuple[int, str, float]]) -> set[int] | None:
    """The pids of this run's RabbitMQ nodes: the beam.smp processes holding a
    socket that listens on one of the broker's AMQP ports, told apart from the
    machine's other nodes (a cluster beside the single broker); None (count
    every beam.smp) before Django is set up or when none is found (another
    user's processes, whose sockets cannot be read)."""
    if _broker_pids.pids and all(p in table for p in _broker_pids.pids):
        return _broker_pids.pids
    try:
        if _broker_pids.ports is None:
            _broker_pids.ports = _broker_ports()
    except Exception:  # Django not set up yet: count them all
        return None
    inodes = {f"socket:[{i}]" for i in _listening_inodes(_broker_pids.ports)}
    found = set()
    for pid, (_, name, _) in table.items():
        if name != "beam.smp":
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    found.add(pid)
                    break
            except OSError:
                continue
    _broker_pids.pids = found
    return found or None


class CpuSample(dict):
    """cpu_seconds()'s figures, and each shared store process's own (pid ->
    (its keys, seconds)), so a delta is taken process by process."""

    pids: dict[int, tuple[tuple[str, ...], float]]


def cpu_seconds() -> CpuSample:
    """CPU time used so far: the servers this run started (web, worker) by
    their pids and descendants, whatever program they run; the shared stores by
    name; the load generator as this process plus the generator processes it
    ran and reaped (wrk, forked asyncio clients: benchmarks.loadgen counts them).
    Of the redis-server processes, only this run's Redis (_our_redis), also
    each node alone as "redis:<port>"; of the beam.smp processes, only this
    run's broker nodes (_our_broker)."""
    from benchmarks import loadgen

    table = proc_table()
    out = CpuSample({"web": 0.0, "worker": 0.0, **dict.fromkeys(SYSTEM_GROUPS.values(), 0.0)})
    out.pids = {}
    mine: set[int] = set()
    for server in STARTED:
        if server.alive:
            pids = tree(table, server.p.pid) - mine
            mine |= pids
            out[server.group] = out.get(server.group, 0.0) + sum(table[p][2] for p in pids)
    ours = _our_redis(table)
    broker = _our_broker(table)
    for pid, (_, name, secs) in table.items():
        group = SYSTEM_GROUPS.get(name)
        if group == "redis" and ours is not None and pid not in ours:
            continue  # another Redis on the machine (the other clusters, the single one)
        if group == "rabbitmq" and broker is not None and pid not in broker:
            continue  # another RabbitMQ node (a cluster beside the single broker)
        if group and pid not in mine:
            out[group] += secs
            out.pids[pid] = ((group,), secs)
    for pid, port in (ours or {}).items():  # and each of them alone (a cluster's nodes)
        out[f"redis:{port}"] = table[pid][2]
        if pid in out.pids:
            out.pids[pid] = (("redis", f"redis:{port}"), out.pids[pid][1])
    out["loadgen"] = time.process_time() + loadgen.child_cpu_seconds()
    return out


def cpu_delta(before: dict[str, float]) -> dict[str, float]:
    """The CPU used since `before`. The shared stores' process by process: one
    restarted meanwhile (another client of the machine's servers) counts from
    its start, the one it replaced until its last sample, never a negative."""
    after = cpu_seconds()
    out = {k: after[k] - before.get(k, 0.0) for k in after}
    if isinstance(before, CpuSample):
        for k in {k for keys, _ in after.pids.values() for k in keys} | {
                k for keys, _ in before.pids.values() for k in keys}:
            out[k] = 0.0
        for pid, (keys, secs) in after.pids.items():
            was = before.pids.get(pid)
            for k in keys:
                out[k] += secs - (was[1] if was and was[0] == keys else 0.0)
    return out
