"""Faults landed on the real servers: the one definition the tests and the fault
matrix (chaos.py) share. Each waits until the server is back before returning.

They act on the machine's own servers (every database and queue on them), so
run them only where nothing else relies on those servers at that moment.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis

REDIS_PORT, MARIADB_PORT, RABBITMQ_PORT = 6379, 3306, 5672


def _port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.3).close()
        return True
    except OSError:
        return False


def _wait(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise RuntimeError(f"{what} not back within {timeout:.0f} s")


# --- RabbitMQ ------------------------------------------------------------------------

def rabbitmq_stop() -> None:
    subprocess.run(["rabbitmqctl", "stop_app"], check=True, capture_output=True, timeout=120)


def rabbitmq_start() -> None:
    subprocess.run(["rabbitmqctl", "start_app"], check=True, capture_output=True, timeout=180)
    subprocess.run(["rabbitmqctl", "await_startup"], check=True, capture_output=True, timeout=180)


def rabbitmq_restart(down_s: float = 0.0) -> None:
    """stop_app / start_app: every client connection drops, durable queues stay."""
    rabbitmq_stop()
    time.sleep(down_s)
    rabbitmq_start()


# --- Redis -----------------------------------------------------------------------------

def redis_ping() -> bool:
    try:
        out = subprocess.run(["redis-cli", "-p", str(REDIS_PORT), "ping"], capture_output=True, text=True,
                             timeout=5).stdout
        return out.strip() == "PONG"
    except (OSError, subprocess.TimeoutExpired):
        return False


def redis_stop() -> None:
    """SHUTDOWN NOSAVE: the server goes, and whatever it held with it."""
    subprocess.run(["redis-cli", "-p", str(REDIS_PORT), "shutdown", "nosave"], capture_output=True, timeout=10)
    _wait(lambda: not _port_open(REDIS_PORT), 15, "Redis stop")


def redis_start_empty() -> None:
    """Start Redis as scripts/lib.sh does, keeping nothing on disk."""
    subprocess.run(["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "--port", str(REDIS_PORT),
                    "--save", "", "--appendonly", "no", "--dir", "/tmp", "--dbfilename", "seckill-never-saved.rdb",
                    "--logfile", "/tmp/seckill-fault-redis.log"],
                   check=True, timeout=30)
    _wait(redis_ping, 30, "Redis")


def redis_restart_empty(down_s: float = 0.0) -> None:
    """Redis killed and started again without persistence: every key is gone."""
    redis_stop()
    time.sleep(down_s)
    redis_start_empty()


def _redis_cli(*args: str) -> str:
    return subprocess.run(["redis-cli", "-p", str(REDIS_PORT), *args], check=True, capture_output=True, text=True,
                          timeout=30).stdout.strip()


SNAPSHOT_FILE = "seckill-fault.rdb"


def redis_save_snapshot() -> str:
    """An RDB file of what Redis holds now (BGSAVE, waited for, then moved to a
    name of our own so no later start loads it by accident). Returns its path,
    for `redis_restart_from`. (dir and dbfilename are protected configs in
    Redis 7: read, never set.)"""
    import os

    folder = _redis_cli("config", "get", "dir").splitlines()[-1]
    name = _redis_cli("config", "get", "dbfilename").splitlines()[-1]
    def persistence() -> dict[str, str]:
        return dict(line.split(":", 1) for line in _redis_cli("info", "persistence").splitlines() if ":" in line)

    # LASTSAVE counts seconds (two saves in one second look alike): count the
    # saves, and wait until none is in progress.
    before = int(persistence()["rdb_saves"])
    _redis_cli("bgsave")
    _wait(lambda: (lambda p: int(p["rdb_saves"]) > before and p["rdb_bgsave_in_progress"] == "0")(persistence()),
          30, "Redis BGSAVE")
    path = os.path.join(folder, SNAPSHOT_FILE)
    os.replace(os.path.join(folder, name), path)
    return path


def redis_restart_from(path: str) -> None:
    """Redis killed and started again from an older RDB file (a restart that
    loaded stale data, as a failover to a lagging replica would): every write
    since the file was made is gone, the older data is back. The file is
    removed once loaded, so no later start finds it."""
    redis_stop()
    redis_start_from(path)


def redis_start_from(path: str) -> None:
    """Start Redis (stopped) from an RDB file made by `redis_save_snapshot`; the file goes once loaded."""
    import os

    folder, name = os.path.split(path)
    subprocess.run(["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "--port", str(REDIS_PORT),
                    "--save", "", "--appendonly", "no", "--dir", folder, "--dbfilename", name,
                    "--logfile", "/tmp/seckill-fault-redis.log"], check=True, timeout=30)
    _wait(redis_ping, 30, "Redis")
    os.remove(path)


def redis_flushall() -> None:
    subprocess.run(["redis-cli", "-p", str(REDIS_PORT), "flushall"], check=True, capture_output=True, timeout=10)


# --- MariaDB ----------------------------------------------------------------------------

def mariadb_ping() -> bool:
    return subprocess.run(["mariadb-admin", "-uroot", "-h127.0.0.1", "ping"], capture_output=True).returncode == 0


def mariadb_stop() -> None:
    subprocess.run(["mariadb-admin", "-uroot", "-h127.0.0.1", "shutdown"], check=True, timeout=60)
    _wait(lambda: not _port_open(MARIADB_PORT), 30, "MariaDB stop")


def mariadb_start() -> None:
    subprocess.run(["start-stop-daemon", "--start", "--oknodo", "--background", "--exec", "/usr/sbin/mariadbd",
                    "--", "--user=mysql"], check=True, timeout=30)
    _wait(mariadb_ping, 60, "MariaDB")


def mariadb_restart(down_s: float = 0.0) -> None:
    mariadb_stop()
    time.sleep(down_s)
    mariadb_start()


def ensure_up() -> None:
    """Whatever a fault left down comes back (used after an interrupted run)."""
    if not redis_ping():
        redis_start_empty()
    if not _port_open(MARIADB_PORT):
        mariadb_start()
    if subprocess.run(["rabbitmqctl", "-q", "status"], capture_output=True, timeout=60).returncode != 0 \
            or not _port_open(RABBITMQ_PORT):
        rabbitmq_start()


# --- Redis Cluster -------------------------------------------------------------------------
# The nodes of a local cluster that `bash scripts/cluster up` runs: nine on
# base..base+8 (3 masters with 2 replicas each), base 7000 unless
# SECKILL_REDIS_CLUSTER_BASE says otherwise. Only the nodes of that cluster are
# touched, found by the pid files scripts/cluster writes.

ROOT = Path(__file__).resolve().parent.parent
CLUSTER_HOST = "127.0.0.1"
CLUSTER_NODES = 9
CLUSTER_PAUSE_S = 8.0


class Cluster:
    def __init__(self, base: int = 7000):
        self.base = base
        self.ports = [base + i for i in range(CLUSTER_NODES)]
        self._password: str | None = None  # read once, on the first question to a node

    @property
    def url(self) -> str:
        """REDIS_URL for this cluster (every node a seed: any one that answers
        gives the layout), with the password scripts/cluster.sh gave it."""
        from benchmarks import harness

        return harness.cluster_url(self.base)

    def password(self) -> str:
        from urllib.parse import unquote

        return unquote(self.url.split("://", 1)[1].partition("@")[0].partition(":")[2])

    def _dir(self, port: int) -> Path:
        root = ROOT / "var" / "cluster"
        return (root / "redis" if self.base == 7000 else root / f"redis-{self.base}") / str(port)

    def pid(self, port: int) -> int | None:
        """The pid of our node on `port`, None when it is not running (a pid
        file left by a SIGKILL, or a pid reused by another program, is no node)."""
        try:
            pid = int((self._dir(port) / "redis.pid").read_text().strip())
            # Redis rewrites its title: "redis-server 127.0.0.1:7000 [cluster]"
            title = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            return None
        return pid if re.match(rf"redis-server \S*:{port}\b", title) else None

    def up(self) -> None:
        """The Redis half of `bash scripts/cluster up` (redis_cluster_up): every node running (a killed one restarted
        from its files rejoins as a replica, a paused one is resumed), every
        slot served by a writable master, every replica in sync."""
        # redis_cluster_up alone: `bash scripts/cluster up` also brings up a
        # RabbitMQ cluster (issue 21), on SECKILL_RABBITMQ_CLUSTER_BASE or 5681,
        # whichever the caller's environment says: not this class's business.
        script = (f'source "{ROOT}/scripts/lib.sh"; source "{ROOT}/scripts/cluster.sh"; '
                  f"redis_cluster_use {self.base}; redis_cluster_up")
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=180)
        if done.returncode != 0:
            raise RuntimeError(f"redis_cluster_up (base {self.base}) failed: {done.stderr.strip()[-800:]}")

    def _node(self, port: int) -> redis.Redis:
        if self._password is None:
            self._password = self.password()
        return redis.Redis(host=CLUSTER_HOST, port=port, password=self._password, socket_timeout=1.0,
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

    def masters(self) -> list[int]:
        """The masters' ports, by the first slot they serve."""
        return list(dict.fromkeys(port for _, _, port in self.layout()))

    def _node_info(self, port: int) -> dict:
        node = self._node(port)
        try:
            return node.info("replication")
        finally:
            node.close()

    def synced_replica(self, master: int) -> int:
        """A replica of `master` that is online with its link up (CLUSTER FAILOVER
        itself waits until it has caught up the master's offset)."""
        info = self._node_info(master)
        for i in range(int(info.get("connected_slaves", 0))):
            entry = info.get(f"slave{i}") or {}
            port = int(entry.get("port", 0))
            if entry.get("state") == "online" and port in self.ports:
                mine = self._node_info(port)
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
                    if owner == port and self._node_info(port).get("role") == "master":
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
        _wait(lambda: self._node_info(replica).get("role") == "master", timeout, f"{replica} to take over")


# --- RabbitMQ cluster ------------------------------------------------------------------------
# The three nodes of a local RabbitMQ cluster that scripts/cluster.sh runs
# (rabbitmq_cluster_use BASE: nodes BASE..BASE+2, named seckill-<port>@localhost,
# their files under var/cluster/rabbitmq-BASE/). Every question and every start
# goes through the script's own functions, so the fault matrix handles its nodes
# exactly as `bash scripts/cluster up` does; only these nodes are touched.

RABBITMQ_CLUSTER_NODES = 3
_NODE_PORT = re.compile(r"seckill-(\d+)@")


class RabbitCluster:
    def __init__(self, base: int = 5687):
        self.base = base
        self.ports = [base + i for i in range(RABBITMQ_CLUSTER_NODES)]

    def _sh(self, body: str, timeout: float = 240) -> subprocess.CompletedProcess:
        """`body` in bash with scripts/cluster.sh loaded on this cluster's base."""
        script = (f'source "{ROOT}/scripts/lib.sh"; source "{ROOT}/scripts/cluster.sh"; '
                  f"rabbitmq_cluster_use {self.base}; {body}")
        return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=timeout)

    def up(self) -> None:
        """rabbitmq_cluster_up: every node running and clustered (a killed or
        stopped node started again rejoins), every quorum queue grown to a
        replica on every node."""
        done = self._sh("rabbitmq_cluster_up")
        if done.returncode != 0:
            raise RuntimeError(f"rabbitmq_cluster_up (base {self.base}) failed: {done.stderr.strip()[-800:]}")

    @property
    def url(self) -> str:
        """CELERY_BROKER_URL of the cluster: every node's URL joined by ';'."""
        done = self._sh("rabbitmq_cluster_url", timeout=30)
        if done.returncode != 0 or not done.stdout.strip():
            raise RuntimeError(f"rabbitmq_cluster_url (base {self.base}) failed: {done.stderr.strip()[-400:]}")
        return done.stdout.strip()

    def pid(self, port: int) -> int | None:
        """The pid of our node on `port`, None when it is not running."""
        done = self._sh(f"rabbitmq_node_pid {port}", timeout=30)
        return int(done.stdout) if done.returncode == 0 and done.stdout.strip().isdigit() else None

    def running(self) -> list[int]:
        return [port for port in self.ports if self.pid(port) is not None]

    def ctl(self, port: int, tool: str, *args: str, timeout: float = 90) -> str:
        """A CLI tool (rabbitmqctl, rabbitmq-queues ...) against the node on `port`."""
        quoted = " ".join(f"'{a}'" for a in (tool, *args))
        done = self._sh(f"rabbitmq_ctl {port} {quoted}", timeout=timeout)
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip()[-400:]
            raise RuntimeError(f"{tool} {' '.join(args)} on {port} failed: {said}")
        return done.stdout

    def _ask(self, *args: str) -> list[dict]:
        """A rabbitmqctl listing (JSON) from the first running node that answers."""
        import json

        errors = []
        for port in self.running():
            try:
                return json.loads(self.ctl(port, "rabbitmqctl", *args, "--formatter", "json") or "[]")
            except (RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
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
        _wait(lambda: not _alive(pid), 15, f"RabbitMQ node {port} to die")

    def stop(self, port: int) -> None:
        """A clean stop of the whole node (rabbitmqctl shutdown: it hands its
        queue leaders over, closes its connections, waits until the node exited)."""
        pid = self.pid(port)
        if pid is None:
            raise RuntimeError(f"no RabbitMQ node running on {port}")
        self.ctl(port, "rabbitmqctl", "shutdown", timeout=120)
        _wait(lambda: not _alive(pid), 60, f"RabbitMQ node {port} to stop")


def _alive(pid: int) -> bool:
    """The process exists and is no zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False
