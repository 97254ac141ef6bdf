"""The local Redis Cluster: 3 masters with 2 replicas each, nine redis-server
processes on 127.0.0.1:<base>..<base>+8 (7000 by default), each with its own
directory var/cluster/redis/<port>/ (redis.conf, nodes.conf, appendonlydir/,
redis.log, redis.pid); another base has var/cluster/redis-<base>/. The single
Redis on 6379 is never touched, nor any process this runner did not start
(found by its pid file and its title)."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

from benchmarks.clusters.nodes import (
    CLUSTER_DIR,
    HOST,
    ClusterError,
    Log,
    apt_install,
    hex_secret,
    installed,
    log,
    made_once,
    pid_file,
    port_open,
    proc_text,
    stop_all,
    stopped,
    wait_port,
    write_private,
)

DEFAULT_BASE = 7000
NODES = 9
REPLICAS = 2
SLOTS = 16384
# A master takes writes only while at least MIN_REPLICAS replicas acknowledged
# within MAX_LAG seconds. One of two: a master cut off from both replicas stops
# taking reservations its successor would not have, yet a promoted replica
# still has the third node of its shard and keeps selling (with one replica
# per master, a shard would refuse every write until its dead node is back).
MIN_REPLICAS = 1
# Replicas acknowledge once a second and Redis counts the lag in whole
# seconds, so 1 would flap into NOREPLICAS whenever a busy machine delays one
# ack; 2 tolerates that and still stops a cut-off master within about 2-3 s,
# around the time the cluster (node timeout 2 s) promotes one of its replicas.
# The gate's fence after a lost shard waits past this bound.
MAX_LAG = 2
NODE_TIMEOUT_MS = 2000
UP_WITHIN_S = 60
STOP_GRACE_S = 15

CONFIG = """\
# Written by benchmarks/clusters on every start of this node: edit redis_cluster.py instead.
port {port}
# loopback only, and a password (the cluster's, in ../password) for every client
# and for the replicas' link to their master
bind {host}
protected-mode yes
requirepass {password}
masterauth {password}
daemonize yes
dir "{dir}"
pidfile "{dir}/redis.pid"
logfile "{dir}/redis.log"
cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout {node_timeout}
# The slots of a dead master fail alone: SKUs on the other masters keep selling
# while its replica is promoted.
cluster-require-full-coverage no
min-replicas-to-write {min_replicas}
min-replicas-max-lag {max_lag}
# The append-only file is what a restarted node comes back from. Redis writes it
# before it answers, so a killed process loses nothing it acknowledged; everysec
# bounds a machine crash to about a second of writes, where "always" would put an
# fsync on every reservation and "no" leaves up to 30 s to the kernel.
appendonly yes
appendfsync everysec
# No RDB snapshots on top: each is a fork a 2-core machine pays for, and the AOF
# already has the data (replication still transfers an RDB, diskless).
save ""
# A replica that (re)joins gets its full sync at once rather than after the 5 s
# Redis waits by default for more replicas to share one transfer: the data here is
# small, and a restarted node should not leave its shard one replica short longer.
repl-diskless-sync-delay 0
"""


def slots_of(ranges: list[str]) -> int:
    """Distinct slots in CLUSTER NODES slot fields ("0-5460", "7"), so a resumed
    old master still claiming its slots hides no gap; "[slot->-id]" entries are
    migrations in progress, not ownership."""
    seen: set[int] = set()
    for entry in ranges:
        if entry[:1].isdigit():
            first, _, last = entry.partition("-")
            seen.update(range(int(first), int(last or first) + 1))
    return len(seen)


class RedisCluster:
    """The cluster on `base` (SECKILL_REDIS_CLUSTER_BASE moves it; keep it within
    7000-7091: each node also listens on its bus port, 10000 above)."""

    def __init__(self, base: int = DEFAULT_BASE, *, directory: Path | None = None, say: Log = log):
        self.base = base
        self.ports = [base + i for i in range(NODES)]
        self.dir = directory or (CLUSTER_DIR / "redis" if base == DEFAULT_BASE else CLUSTER_DIR / f"redis-{base}")
        self.say = say

    # --- the password ------------------------------------------------------------------
    # Every node requires one (requirepass; masterauth for the replicas), made once
    # per cluster into <dir>/password (0600, hex, so it goes into a URL as it is)
    # and kept until down --wipe: any local user could otherwise write to the
    # cluster's keys, and the tests and benchmarks run on it. redis-cli gets it
    # through REDISCLI_AUTH (never in argv), the app through url().

    @property
    def password_file(self) -> Path:
        return self.dir / "password"

    def password(self) -> str:
        return made_once(self.password_file, hex_secret, 0o600)

    def url(self) -> str:
        """REDIS_URL of this cluster with its password: every node a seed, so any one
        that answers gives the layout."""
        return f"redis+cluster://:{self.password()}@" + ",".join(f"{HOST}:{port}" for port in self.ports)

    # --- one node ------------------------------------------------------------------------

    def node_dir(self, port: int) -> Path:
        return self.dir / str(port)

    def pid(self, port: int) -> int | None:
        """Our node on `port`, None when it is not running: a pid file left by a
        SIGKILL, or its pid reused, counts only while that process is a
        redis-server on this port (its title: "redis-server 127.0.0.1:7000 [cluster]")."""
        pid = pid_file(self.node_dir(port) / "redis.pid")
        if pid is None:
            return None
        return pid if re.match(rf"redis-server \S*:{port}\b", proc_text(pid, "cmdline").replace("\n", " ")) else None

    def cli(self, port: int, *args: str, auth: bool = True) -> str | None:
        """One redis-cli command, at most 2 s (a SIGSTOPped node accepts the
        connection and never answers, and redis-cli has no reply timeout of its
        own); its output, None when it failed."""
        env = {k: v for k, v in os.environ.items() if k != "REDISCLI_AUTH"}
        if auth:
            env["REDISCLI_AUTH"] = self.password()
        try:
            done = subprocess.run(["redis-cli", "-h", HOST, "-p", str(port), *args], env=env, capture_output=True,
                                  text=True, timeout=2)
        except subprocess.TimeoutExpired:
            return None
        return done.stdout.replace("\r", "") if done.returncode == 0 else None

    def info(self, port: int, section: str) -> dict[str, str]:
        """CLUSTER INFO ("cluster") or an INFO section of a node, {} when it does not answer."""
        out = self.cli(port, *(("cluster", "info") if section == "cluster" else ("info", section))) or ""
        return dict(line.split(":", 1) for line in out.splitlines() if ":" in line)

    def myself(self, port: int) -> list[str]:
        """The node's own line of CLUSTER NODES, split; [] when it does not answer."""
        for line in (self.cli(port, "cluster", "nodes") or "").splitlines():
            if " myself" in line:
                return line.split()
        return []

    def write_config(self, port: int) -> None:
        directory = self.node_dir(port)
        write_private(directory / "redis.conf", CONFIG.format(
            port=port, host=HOST, password=self.password(), dir=directory, node_timeout=NODE_TIMEOUT_MS,
            min_replicas=MIN_REPLICAS, max_lag=MAX_LAG))

    # --- up --------------------------------------------------------------------------------

    def ensure_installed(self) -> None:
        missing = [pkg for cmd, pkg in (("redis-server", "redis-server"), ("redis-cli", "redis-tools"))
                   if not installed(cmd)]
        if missing:
            apt_install(*missing, say=self.say)

    def ports_taken(self) -> bool:
        """Any of the nine ports, or their bus ports, in use by anything."""
        return any(port_open(port) or port_open(port + 10000) for port in self.ports)

    def start_nodes(self) -> None:
        """Every node that is not running started; a node left paused (a fault run
        that died mid-pause) resumed. Every port is checked before any node
        starts, so a conflict leaves nothing half up."""
        for port in self.ports:
            if self.pid(port) is None and (port_open(port) or port_open(port + 10000)):
                raise ClusterError(f"port {port} or {port + 10000} is in use by a process this script did not "
                                   "start: stop it first")
        started = 0
        for port in self.ports:
            pid = self.pid(port)
            if pid is not None:
                if stopped(pid):
                    self.say(f"resuming paused node {port}")
                    os.kill(pid, signal.SIGCONT)
                continue
            self.node_dir(port).mkdir(parents=True, exist_ok=True)
            self.write_config(port)
            if subprocess.run(["redis-server", str(self.node_dir(port) / "redis.conf")]).returncode != 0:
                raise ClusterError(f"redis-server {port} did not start: see {self.node_dir(port)}/redis.log")
            started += 1
        for port in self.ports:
            try:
                wait_port(port, "redis-server", 30)
            except ClusterError as exc:
                raise ClusterError(f"{exc}; see {self.node_dir(port)}/redis.log") from None
        if started:
            self.say(f"started {started} Redis node(s)")

    def _redis_cli_cluster(self, *args: str) -> None:
        subprocess.run(["redis-cli", "--cluster", *args], env=dict(os.environ, REDISCLI_AUTH=self.password()),
                       check=True, stdout=subprocess.DEVNULL)

    def form(self) -> None:
        """The cluster created on fresh nodes, or a fresh node joined to a formed one."""
        formed, fresh = None, []
        for port in self.ports:
            info = self.info(port, "cluster")
            if info.get("cluster_slots_assigned") == str(SLOTS):
                formed = formed or port
            elif info.get("cluster_slots_assigned") == "0" and info.get("cluster_known_nodes") == "1":
                fresh.append(port)
        if formed is None and len(fresh) == len(self.ports):
            self.say(f"creating the cluster: 3 masters, {REPLICAS} replicas each")
            self._redis_cli_cluster("create", *(f"{HOST}:{port}" for port in self.ports),
                                    "--cluster-replicas", str(REPLICAS), "--cluster-yes")
        elif formed is not None:
            self._join_fresh(formed, fresh)
        else:
            raise ClusterError("the nodes hold a partly formed cluster (no node has all 16384 slots assigned): "
                               "bash scripts/cluster down --wipe, then up, starts a fresh one")

    def _join_fresh(self, formed: int, fresh: list[int]) -> None:
        """A node whose directory was deleted comes back empty: it joins as a
        replica of the master with the fewest. The others still know it by its
        old id, which (once a new id answers at its address) lingers as a
        "noaddr" node: forgotten everywhere. A replica refuses to forget its own
        master, so a wiped master leaves such a trace behind: down --wipe is the
        way to start over."""
        for port in fresh:
            self.say(f"adding fresh node {port} to the cluster as a replica")
            self._redis_cli_cluster("add-node", f"{HOST}:{port}", f"{HOST}:{formed}", "--cluster-slave")
        if not fresh:
            return
        time.sleep(1)  # the new ids spread by gossip first
        for line in (self.cli(formed, "cluster", "nodes") or "").splitlines():
            fields = line.split()
            if len(fields) > 2 and "noaddr" in fields[2]:
                for other in self.ports:
                    self.cli(other, "cluster", "forget", fields[0])

    def serving(self) -> bool:
        """Every slot has a live master that takes writes, and every node that
        answers agrees. The others' cluster_state is no proof: with
        cluster-require-full-coverage no it stays ok, and they count a dead
        master's slots as ok for the node timeout and more, so the slots are
        counted on the live masters themselves."""
        ranges: list[str] = []
        for port in self.ports:
            if self.pid(port) is None:
                continue
            line = self.myself(port)
            if not line:
                continue  # running but not answering (paused): serves nothing
            info = self.info(port, "cluster")
            if info.get("cluster_state") != "ok" or info.get("cluster_slots_ok") != str(SLOTS):
                return False
            if "master" in line[2]:
                good = self.info(port, "replication").get("min_slaves_good_slaves", "")
                if not good.isdigit() or int(good) < MIN_REPLICAS:
                    return False
                ranges += line[8:]
        return slots_of(ranges) == SLOTS

    def healthy(self) -> bool:
        """Serving, with every node running and every replica in sync."""
        for port in self.ports:
            if self.pid(port) is None:
                return False
            repl = self.info(port, "replication")
            if repl.get("role") == "slave" and repl.get("master_link_status") != "up":
                return False
        return self.serving()

    def secure_running(self) -> None:
        """The password given to running nodes that were started without one: the
        next up sets it live (masterauth everywhere first, so that no replica is
        refused by its master), and every later start reads it from redis.conf."""
        bare = [port for port in self.ports if self.pid(port) is not None and
                (self.cli(port, "ping", auth=False) or "").strip() == "PONG"]
        if not bare:
            return
        password = self.password()
        self.say(f"Redis node(s) {' '.join(map(str, bare))} run without the cluster's password: setting it "
                 f"({self.password_file})")
        for setting in ("masterauth", "requirepass"):
            for port in bare:
                if self.cli(port, "config", "set", setting, password, auth=False) is None:
                    raise ClusterError(f"node {port} refused CONFIG SET {setting}")

    def rebalance(self) -> None:
        """Replicas moved until every master has REPLICAS of them. Kills and
        failovers in a row can leave 3, 2 and 1 (a replica migrates to a master
        left without one); a master with one replica then has none after its
        next failover and refuses writes (min-replicas-to-write)."""
        moved = 0
        for _ in range(6):
            listing = self.cli(self.ports[0], "cluster", "nodes")
            if listing is None:
                return
            move = _replica_to_move([line.split() for line in listing.splitlines() if line.strip()])
            if move is None or self.cli(move[0], "cluster", "replicate", move[1]) is None:
                break
            moved += 1
            time.sleep(0.5)
        if moved:
            self.say(f"moved {moved} replica(s) so that every master has {REPLICAS}")

    def up(self) -> None:
        """Installed where missing, every node running, the cluster formed, and
        waited for until healthy (cluster_state:ok comes first; a restarted node
        then still needs its resync); then once rebalanced and waited for again."""
        deadline = time.monotonic() + UP_WITHIN_S
        self.ensure_installed()
        self.secure_running()
        self.start_nodes()
        self.form()
        balanced = False
        while time.monotonic() < deadline:
            if self.healthy():
                if not balanced:
                    balanced = True
                    self.rebalance()
                    continue  # a moved replica resyncs from its new master
                self.say(f"Redis Cluster ok on {HOST}:{self.ports[0]}-{self.ports[-1]}")
                return
            time.sleep(0.1)
        from benchmarks.clusters.status import redis_status

        raise ClusterError(f"the Redis Cluster is not healthy after {UP_WITHIN_S} s:\n{redis_status(self)[1]}")

    # --- down --------------------------------------------------------------------------------

    def down(self, wipe: bool = False) -> None:
        """The nodes this runner started stopped (by their pid files), their data
        kept unless `wipe`: the next up brings back the same cluster."""
        pids = []
        for port in self.ports:
            pid = self.pid(port)
            if pid is not None:
                pids.append(pid)
            elif port_open(port):
                self.say(f"port {port}: not a node of {self.dir} (no live pid file), left running")
        stop_all(pids, grace_s=STOP_GRACE_S, what="redis-server", nodes="Redis", say=self.say)
        if wipe:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.say(f"removed {self.dir}: the next up forms a fresh cluster")


def _replica_to_move(nodes: list[list[str]]) -> tuple[int, str] | None:
    """(port of a replica, id of the master it should follow): one of a master
    with more than REPLICAS, for a serving master with fewer; None when none is."""
    live = [n for n in nodes if len(n) > 3 and "fail" not in n[2]]
    followers: dict[str, list[list[str]]] = {}
    for n in live:
        if "slave" in n[2]:
            followers.setdefault(n[3], []).append(n)
    needy = next((n[0] for n in live if "master" in n[2] and len(n) > 8 and len(followers.get(n[0], ())) < REPLICAS),
                 None)
    donor = next((replicas for replicas in followers.values() if len(replicas) > REPLICAS), None)
    if needy is None or donor is None:
        return None
    return int(re.split(r"[:@]", donor[0][1])[1]), needy
