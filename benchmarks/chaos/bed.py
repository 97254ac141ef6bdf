"""The fault matrix on the multi-host test bed (--hosts, benchmarks/hosts): the
bed's Redis Cluster and RabbitMQ nodes with the same hands as the local
clusters' (nodes.RedisNodes, nodes.RabbitNodes), and the stack on the bed's
hosts: a web instance on web1 and one on web2 behind HAProxy (root namespace,
127.0.0.1), a worker on worker1 and one on worker2, beat in the root namespace.

A Redis node is named "<host>:<port>" (store2:7000), a RabbitMQ node by its
host's number (2 for mq2): the node column reads 'store1:7000>store2:7001' and
'mq1>mq3'."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time

import redis

from benchmarks.chaos.nodes import _wait
from benchmarks.chaos.stack import CLUSTER_WORKERS, Stack
from benchmarks.hosts import app, bed, cuts
from benchmarks.hosts.net import Host

UP_WITHIN_S = 90


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _node(name: str) -> tuple[Host, int]:
    h, port = name.split(":")
    return bed.host(h), int(port)


class BedRedis:
    """The bed's Redis Cluster: nine nodes on store1-3, shard k's home master store<k+1>:7000."""

    def __init__(self) -> None:
        self.ports = [f"{h.name}:{p}" for h, p in bed.redis_nodes()]

    def url(self) -> str:
        return bed.redis_url()

    def pid(self, name: str) -> int | None:
        return bed.redis_pid(*_node(name))

    def _cli(self, name: str, *args: str) -> str | None:
        return bed.redis_cli(*_node(name), *args, timeout=2)

    def layout(self, skip: tuple[str, ...] = ()) -> list[tuple[int, int, str]]:
        """(first slot, last slot, master) of each range, in the view of the first node that answers."""
        for name in self.ports:
            if name in skip or self.pid(name) is None:
                continue
            h, port = _node(name)
            node = redis.Redis(host=h.ip, port=port, password=bed.redis_password(), socket_timeout=1.0,
                               socket_connect_timeout=0.5)
            try:
                ranges = node.execute_command("CLUSTER", "SLOTS")
            except redis.RedisError:
                continue
            finally:
                node.close()
            by_ip = {s.ip: s.name for s in bed.STORES}
            return sorted((int(start), int(end), f"{by_ip.get(_text(m[0]), _text(m[0]))}:{int(m[1])}")
                          for start, end, m, *_ in ranges)
        return []

    def slot_master(self, slot: int, skip: tuple[str, ...] = ()) -> str | None:
        return next((m for start, end, m in self.layout(skip) if start <= slot <= end), None)

    def role(self, name: str) -> str:
        return bed.redis_info(*_node(name), "replication").get("role", "down")

    def replicas_of(self, master: str) -> list[str]:
        """The nodes replicating `master` now (by their own word)."""
        h, port = _node(master)
        out = []
        for name in self.ports:
            info = bed.redis_info(*_node(name), "replication")
            if info.get("role") == "slave" and info.get("master_host") == h.ip and info.get("master_port") == str(port):
                out.append(name)
        return out

    def synced_replica(self, master: str) -> str:
        for name in self.replicas_of(master):
            if bed.redis_info(*_node(name), "replication").get("master_link_status") == "up":
                return name
        raise RuntimeError(f"no synced replica of {master}")

    def kill(self, name: str) -> None:
        pid = self.pid(name)
        if pid is None:
            raise RuntimeError(f"no node running as {name}")
        os.kill(pid, signal.SIGKILL)
        _wait(lambda: self.pid(name) is None, 10, f"node {name} to die")

    def signal(self, name: str, sig: signal.Signals) -> None:
        pid = self.pid(name)
        if pid is None:
            raise RuntimeError(f"no node running as {name}")
        os.kill(pid, sig)

    def wait_promoted(self, slot: int, old: str, timeout: float = 30) -> str:
        """Until a node other than `old` serves `slot` as a master, by its own word."""
        found: list[str] = []

        def promoted() -> bool:
            for name in self.ports:
                if name == old or self.pid(name) is None:
                    continue
                if self.slot_master(slot, skip=tuple(p for p in self.ports if p != name)) == name \
                        and self.role(name) == "master":
                    found[:] = [name]
                    return True
            return False

        _wait(promoted, timeout, f"a replica of {old} promoted")
        return found[0]

    def failover(self, replica: str, timeout: float = 60) -> None:
        """CLUSTER FAILOVER on `replica`, asked again every 5 s: a replica still
        syncing (just restarted) lets a manual failover time out and abort."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.role(replica) == "master":
                return
            self._cli(replica, "cluster", "failover")
            until = time.monotonic() + 5
            while time.monotonic() < until and self.role(replica) != "master":
                time.sleep(0.2)
        raise RuntimeError(f"{replica} to take over not back within {timeout:.0f} s")

    def up(self) -> None:
        """Every node running (a killed one restarted from its files rejoins as a
        replica, a paused one resumed), no cut left on a store host, the cluster
        healthy, and every shard's master back home (store<k+1>:7000, by a
        planned failover), so each run's cuts meet the same layout."""
        for h in bed.STORES:
            h.heal_all()
        for name in self.ports:
            pid = self.pid(name)
            if pid:
                os.kill(pid, signal.SIGCONT)
        bed.start_redis()
        bed._until(bed.redis_healthy, UP_WITHIN_S, "the bed's Redis Cluster healthy")
        for k in range(3):
            home = f"{bed.redis_master_of_shard(k)[0].name}:7000"
            if self.role(home) == "slave":
                self.failover(home)
        bed._until(bed.redis_healthy, UP_WITHIN_S, "the bed's Redis Cluster healthy after the failbacks")


class BedRabbit:
    """The bed's RabbitMQ nodes rabbit@10.77.0.21-23, named 1-3 (mq1-3)."""

    def __init__(self) -> None:
        self.ports = [1, 2, 3]

    def host(self, n: int) -> Host:
        return bed.MQS[n - 1]

    def url(self) -> str:
        return bed.rabbit_url()

    def pid(self, n: int) -> int | None:
        return bed.rabbit_pid(self.host(n))

    def running(self) -> list[int]:
        return [n for n in self.ports if self.pid(n)]

    def node_of(self, text: str) -> int | None:
        """The node a name or pid names (rabbit@10.77.0.22, <rabbit@10.77.0.22.123.0>)."""
        return next((n for n in self.ports if f"@{self.host(n).ip}" in (text or "")), None)

    def _ask(self, *args: str) -> list[dict]:
        errors = []
        for n in self.running():
            done = bed.rabbit_ctl(self.host(n), "rabbitmqctl", *args, "--formatter", "json", timeout=60)
            if done.returncode == 0:
                try:
                    return json.loads(done.stdout or "[]")
                except ValueError as exc:
                    errors.append(str(exc))
            else:
                errors.append((done.stderr or done.stdout).strip()[-200:])
        raise RuntimeError(f"no RabbitMQ node of the bed answered {args[0]}: {'; '.join(errors)[-400:]}")

    def leader(self, queue: str) -> int:
        for q in self._ask("list_queues", "-p", "/", "name", "leader"):
            if q.get("name") == queue:
                n = self.node_of(str(q.get("leader")))
                if n is None:
                    raise RuntimeError(f"queue {queue} has no leader on a node of the bed: {q}")
                return n
        raise RuntimeError(f"no queue {queue} on the bed's RabbitMQ")

    def consumers(self, queue: str, workers: list[str] = ()) -> list[dict]:
        out = []
        for c in self._ask("list_consumers", "-p", "/", "queue_name", "channel_pid", "consumer_tag", "active"):
            if c.get("queue_name") != queue:
                continue
            tag = str(c.get("consumer_tag"))
            owner = tag.split("/", 1)[0]
            worker = next((w for w in workers if owner == w or owner.startswith(w + "#")), None)
            out.append({"tag": tag, "active": c.get("active") in (True, "true"), "worker": worker,
                        "node": self.node_of(str(c.get("channel_pid")))})
        return out

    def kill(self, n: int) -> None:
        pid = self.pid(n)
        if pid is None:
            raise RuntimeError(f"no RabbitMQ node running on mq{n}")
        os.kill(pid, signal.SIGKILL)
        _wait(lambda: self.pid(n) is None, 15, f"RabbitMQ node mq{n} to die")

    def stop(self, n: int) -> None:
        pid = self.pid(n)
        if pid is None:
            raise RuntimeError(f"no RabbitMQ node running on mq{n}")
        bed.rabbit_ctl(self.host(n), "rabbitmqctl", "shutdown", timeout=120)
        _wait(lambda: self.pid(n) is None, 60, f"RabbitMQ node mq{n} to stop")

    def up(self) -> None:
        """No cut left on an mq host, every node running and clustered (a
        paused minority resumes by itself once it sees the majority), every
        quorum queue grown to a replica on every node."""
        for h in bed.MQS:
            h.heal_all()
        bed.start_rabbit()
        bed._until(bed.rabbit_clustered, 180, "the bed's RabbitMQ clustered")
        for h in bed.MQS:
            bed.rabbit_ctl(h, "rabbitmq-queues", "grow", bed.rabbit_name(h), "all", timeout=60)


class BedProc(app.Proc):
    """app.Proc with what the matrix's Server has: kill, children, log_text."""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.alive:
            os.killpg(self.popen.pid, sig)
            self.popen.wait(30)

    def children(self) -> list[int]:
        out = subprocess.run(["pgrep", "-P", str(self.popen.pid)], capture_output=True, text=True).stdout
        return [int(x) for x in out.split()]


class BedStack(Stack):
    """The stack on the bed's hosts; HAProxy's view of its web hosts by their names web1, web2."""

    def wait_webs(self, timeout: float = 60) -> None:
        running = [i for i, web in enumerate(self.webs) if web.alive]
        for i in running:
            app.wait_tcp(bed.WEBS[i].ip, bed.WEB_PORT)
        deadline, seen = time.monotonic() + timeout, {}
        while time.monotonic() < deadline:
            seen = app.proxy_servers(self.proxy)
            if all(seen.get(f"web{i + 1}") == "UP" for i in running):
                return
            time.sleep(0.2)
        raise RuntimeError(f"HAProxy does not see web hosts {[i + 1 for i in running]} UP: {seen}")


def _web(h: Host) -> BedProc:
    bind = f"{h.ip}:{bed.WEB_PORT}"
    from benchmarks.hosts import net

    env = dict(os.environ, SECKILL_WEB_BIND=bind, GUNICORN_BIND=bind, WEB_CONCURRENCY="1",
               SECKILL_TRUSTED_PROXIES=net.BRIDGE_IP)
    return BedProc(h, [str(app.BIN / "python"), "-m", "seckill_site.serve"], env, f"chaos-web-{h.name}.log")


def _worker(h: Host, name: str) -> BedProc:
    return BedProc(h, [str(app.BIN / "celery"), "-A", "seckill_site", "worker", "-l", "info", "-n", f"{name}@%h",
                       "--concurrency", "2", "--without-mingle", "--without-gossip", "-Q",
                       os.environ["SECKILL_QUEUE"]], dict(os.environ), f"chaos-worker-{h.name}.log")


def start_bed_stack(port: int, rabbit: BedRabbit) -> Stack:
    """Web instances on web1 and web2 behind HAProxy on 127.0.0.1:`port`, a
    worker on worker1 and on worker2 (each partition: one active confirm
    consumer, one standby), beat in the root namespace (an operations host)."""
    webs = [_web(h).start() for h in bed.WEBS]
    for h in bed.WEBS:
        app.wait_tcp(h.ip, bed.WEB_PORT)
    proxy = app.start_proxy(port, bed.WEBS, name="chaos-haproxy", proc=BedProc)
    names = [f"chaos{i}" for i in range(1, CLUSTER_WORKERS + 1)]
    workers = [_worker(h, n).start() for h, n in zip(bed.WORKERS, names)]
    schedule = app.LOGS / "chaos-beat.schedule"
    beat = BedProc(None, [str(app.BIN / "celery"), "-A", "seckill_site", "beat", "-l", "warning", "-s",
                          str(schedule)], dict(os.environ), "chaos-beat.log").start()
    host = socket.gethostname()  # Celery's %h: every namespace shares the machine's name
    stack = BedStack(port, webs, workers, beat, web_ports=[bed.WEB_PORT] * len(webs),
                     worker_names=[f"{n}@{host}" for n in names], proxy=proxy, rabbit=rabbit)
    stack.wait_webs()
    stack.wait_workers()
    return stack


def heal_all_cuts() -> None:
    cuts.heal_all()
