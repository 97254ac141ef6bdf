"""The local MariaDB Galera cluster: 3 mariadbd processes of the Debian package
(mariadb-server 10.11 with galera-4) on 127.0.0.1:<base>..<base>+2 (3311 by
default) and a HAProxy front on <base>+3 that sends every connection to one
synced node at a time. Each node has its own directory
var/cluster/mariadb/<port>/ (my.cnf, data/, mariadbd.log, node.pid,
mariadbd.sock); another base has var/cluster/mariadb-<base>/. Its
group-communication port is <port>+1000, its IST port <port>+1100 and its SST
port <port>+1200. The single server on 3306 is never touched, nor any process
this runner did not start (found by its pid file and its command line).

Every node reads deploy/galera.cnf (the durable settings, each with why) and
then its own lines; root has no password on 127.0.0.1, as the single server of
the local defaults, and the nodes listen on loopback only. The full copy a
joiner may need (SST, by mariabackup) connects as a user of its own whose
password is made once into <dir>/sst-password.

A cluster whose every node is down comes back by the first of these that applies:
a node that left last in an orderly way (safe_to_bootstrap: 1 in its
grastate.dat) bootstraps it; else, after a crash, every node has the last
primary component on disk (pc.recovery) and the three form it again by
themselves; else each node's last committed position is recovered
(mariadbd --wsrep-recover) and the most advanced one bootstraps."""
from __future__ import annotations

import contextlib
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
    ROOT,
    ClusterError,
    Log,
    alive,
    apt_install,
    hex_secret,
    in_parallel,
    installed,
    log,
    made_once,
    pid_file,
    port_open,
    proc_text,
    stop_all,
    stopped,
    write_private,
)

DEFAULT_BASE = 3311
NODES = 3
MARIADBD = "/usr/sbin/mariadbd"
GALERA_LIB = Path("/usr/lib/galera/libgalera_smm.so")
SETTINGS = ROOT / "deploy" / "galera.cnf"
CHECK = ROOT / "deploy" / "galera-check"
UP_WITHIN_S = 240
# A node flushes its buffer pool and leaves the group on SIGTERM; a big one takes a while.
STOP_GRACE_S = 60
# How long the three crashed nodes get to form their last primary component
# again by themselves (pc.recovery) before their positions are recovered instead.
RECOVERY_WITHIN_S = 60
SST_USER = "seckill_sst"
DATABASE = "seckill"

NODE_CONFIG = """\
# Written by benchmarks/clusters on every start of this node: edit mariadb_cluster.py
# (this node's lines) or deploy/galera.cnf (every node's) instead.
!include {settings}

[mysqld]
port = {port}
bind_address = {host}
datadir = {dir}/data
socket = {dir}/mariadbd.sock
pid_file = {dir}/mariadbd.pid
log_error = {dir}/mariadbd.log
# the binary log's events name the node they were written on
server_id = {port}
skip_name_resolve = ON
innodb_buffer_pool_size = 128M
wsrep_node_name = node-{port}
wsrep_node_address = {host}:{gcomm}
wsrep_cluster_address = gcomm://{peers}
wsrep_sst_receive_address = {host}:{sst}
wsrep_sst_auth = {sst_user}:{sst_password}
# deploy/galera.cnf's provider options, then this node's ports (the whole string
# replaces the one of the included file)
wsrep_provider_options = "{provider};base_host={host};base_port={gcomm};gmcast.listen_addr=tcp://{host}:{gcomm};ist.recv_addr={host}:{ist}"

[client]
socket = {dir}/mariadbd.sock
"""

HAPROXY_CONFIG = """\
# Written by benchmarks/clusters on every up: edit mariadb_cluster.py instead.
# The database front: every connection to ONE synced node (the first server, the
# others backups), so the project never writes to two nodes at once.
global
    daemon
    pidfile {dir}/haproxy.pid
    maxconn 4096
    # deploy/galera-check runs as a process of its own (HAProxy's mysql-check
    # cannot read wsrep_local_state / wsrep_ready)
    external-check
    insecure-fork-wanted

defaults
    mode tcp
    timeout connect 2s
    # the app keeps its connections (CONN_MAX_AGE 600 s); the front must not cut them first
    timeout client 1h
    timeout server 1h
    timeout check 2500ms

listen galera
    bind {host}:{front}
    option external-check
    external-check path "/usr/bin:/bin"
    external-check command {check}
    # Sticky: the server every connection went to is remembered in a one-entry
    # table, so once the front has moved to another node it stays there when the
    # old writer comes back synced; only when the current one fails does it move
    # again. No fail-back: two nodes never take writes at the same time.
    stick-table type integer size 1
    stick on int(1)
    # A node is checked every 500 ms and marked down after two failures (about a
    # second, two and a half seconds for a paused one: the check's own timeout);
    # its sessions are closed then, so no client keeps writing to a node the
    # others may have left. Up again after three good checks.
    default-server inter 500ms fastinter 500ms downinter 1s rise 3 fall 2 on-marked-down shutdown-sessions
{servers}
"""


class GaleraCluster:
    """The cluster on `base` (SECKILL_MARIADB_CLUSTER_BASE moves it) and its front on base+3."""

    def __init__(self, base: int = DEFAULT_BASE, *, directory: Path | None = None, say: Log = log):
        self.base = base
        self.ports = [base + i for i in range(NODES)]
        self.front = base + NODES
        self.start_positions: dict[int, str] = {}
        self.dir = directory or (CLUSTER_DIR / "mariadb" if base == DEFAULT_BASE
                                 else CLUSTER_DIR / f"mariadb-{base}")
        self.say = say

    def url(self, database: str = DATABASE) -> str:
        """DATABASE_URL through the front."""
        return f"mysql://root:@{HOST}:{self.front}/{database}"

    # --- one node ----------------------------------------------------------------------------

    @staticmethod
    def gcomm_port(port: int) -> int:
        return port + 1000

    @staticmethod
    def ist_port(port: int) -> int:
        return port + 1100

    @staticmethod
    def sst_port(port: int) -> int:
        return port + 1200

    def all_ports(self) -> list[int]:
        return [self.front] + [p for port in self.ports
                               for p in (port, self.gcomm_port(port), self.ist_port(port), self.sst_port(port))]

    def node_dir(self, port: int) -> Path:
        return self.dir / str(port)

    def cnf(self, port: int) -> Path:
        return self.node_dir(port) / "my.cnf"

    def pid(self, port: int) -> int | None:
        """Our node on `port`, None when it is not running: the pid file counts only
        while its process is a mariadbd with this node's my.cnf."""
        pid = pid_file(self.node_dir(port) / "node.pid")
        if pid is None or not alive(pid):
            return None
        return pid if f"--defaults-file={self.cnf(port)}" in proc_text(pid, "cmdline").splitlines() else None

    def front_pid(self) -> int | None:
        pid = pid_file(self.dir / "haproxy.pid")
        if pid is None or not alive(pid):
            return None
        return pid if str(self.dir / "haproxy.cfg") in proc_text(pid, "cmdline").splitlines() else None

    def sst_password(self) -> str:
        return made_once(self.dir / "sst-password", hex_secret, 0o600).strip()

    def write_config(self, port: int) -> None:
        """my.cnf holds the SST user's password: the owner's only."""
        provider = re.search(r'^wsrep_provider_options\s*=\s*"([^"]*)"', SETTINGS.read_text(), re.M)
        if provider is None:
            raise ClusterError(f"{SETTINGS} has no wsrep_provider_options line")
        self.node_dir(port).mkdir(parents=True, exist_ok=True)
        peers = ",".join(f"{HOST}:{self.gcomm_port(p)}" for p in self.ports)
        write_private(self.cnf(port), NODE_CONFIG.format(
            settings=SETTINGS, port=port, host=HOST, dir=self.node_dir(port), gcomm=self.gcomm_port(port),
            ist=self.ist_port(port), sst=self.sst_port(port), peers=peers, sst_user=SST_USER,
            sst_password=self.sst_password(), provider=provider[1]))

    def sql(self, port: int, statement: str, *, timeout: float = 10) -> str | None:
        """`statement` on the node as root over TCP, its rows tab-separated; None
        when the node does not answer (or refuses: 1047 off the primary component)."""
        try:
            done = subprocess.run(["mariadb", "--no-defaults", "-uroot", f"-h{HOST}", f"-P{port}",
                                   "--connect-timeout=2", "-N", "-B", "-e", statement],
                                  capture_output=True, text=True, timeout=timeout)
        except (subprocess.TimeoutExpired, OSError):
            return None
        return done.stdout if done.returncode == 0 else None

    def wsrep(self, port: int) -> dict[str, str]:
        """The node's wsrep status (cluster_size, cluster_status, local_state,
        local_state_comment, ready, ...); {} when it does not answer or is paused."""
        pid = self.pid(port)
        if pid is None or stopped(pid):
            return {}
        out = self.sql(port, "SHOW GLOBAL STATUS LIKE 'wsrep_%'")
        if out is None:
            return {}
        return dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)

    def synced(self, port: int, size: int = NODES) -> bool:
        """The node is Synced and ready in a primary component of `size` nodes."""
        status = self.wsrep(port)
        return (status.get("wsrep_cluster_status") == "Primary" and status.get("wsrep_local_state") == "4"
                and status.get("wsrep_ready") == "ON" and status.get("wsrep_cluster_size") == str(size))

    def whole(self) -> bool:
        return all(self.synced(port) for port in self.ports)

    def grastate(self, port: int) -> dict[str, str]:
        """grastate.dat's fields (uuid, seqno, safe_to_bootstrap); {} when there is none."""
        try:
            text = (self.node_dir(port) / "data" / "grastate.dat").read_text()
        except OSError:
            return {}
        return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())
                    if v and not k.startswith("#")}

    # --- start ---------------------------------------------------------------------------------

    def ports_taken(self) -> bool:
        """Any of the cluster's ports (nodes, group communication, IST, SST, front) in use."""
        return any(port_open(port) for port in self.all_ports())

    def ensure_installed(self) -> None:
        missing = []
        if not os.access(MARIADBD, os.X_OK) or not installed("mariadb"):
            missing += ["mariadb-server", "mariadb-client"]
        if not GALERA_LIB.exists():
            missing.append("galera-4")
        if not installed("mariabackup"):
            missing.append("mariadb-backup")
        if not installed("socat"):  # mariabackup's SST streams through it
            missing.append("socat")
        if not installed("haproxy"):
            missing.append("haproxy")
        if missing:
            apt_install(*missing, say=self.say)

    def init_data(self, port: int) -> None:
        """A fresh data directory: the system tables, root without a password on
        127.0.0.1 and localhost (the local defaults; the node listens on loopback
        only). A joiner's is replaced by its first full copy anyway."""
        data = self.node_dir(port) / "data"
        if (data / "mysql").is_dir():
            return
        shutil.rmtree(data, ignore_errors=True)
        done = subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root",
                               "--auth-root-authentication-method=normal", "--skip-test-db",
                               "--skip-name-resolve"], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise ClusterError(f"mariadb-install-db for node {port} failed: {(done.stderr or done.stdout)[-400:]}")

    def start(self, port: int, *extra: str) -> None:
        """The node started in the background (it outlives this process); `extra`:
        --wsrep-new-cluster for the node that bootstraps."""
        for p in (port, self.gcomm_port(port), self.ist_port(port), self.sst_port(port)):
            if port_open(p):
                raise ClusterError(f"port {p} is in use by a process this script did not start: stop it first")
        self.write_config(port)
        if not extra:
            extra = self.donors(port) + self.start_position(port, recover=True)
        # Its pid as this runner started it: mariadbd writes its own pid file only once it
        # has met the group, and a crashed cluster's first node waits there for the others.
        with open(self.node_dir(port) / "mariadbd.out", "ab") as out:
            node = subprocess.Popen([MARIADBD, f"--defaults-file={self.cnf(port)}", "--user=root", *extra],
                                    cwd=self.node_dir(port), stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        write_private(self.node_dir(port) / "node.pid", f"{node.pid}\n")
        deadline = time.monotonic() + 10  # until the child has exec'd: before, its command line is this one's
        while self.pid(port) is None and node.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)

    def start_position(self, port: int, *, recover: bool = False) -> tuple[str, ...]:
        """--wsrep_start_position for a node after --wsrep-recover found where it
        stopped (as Debian's galera_recovery gives it to the service): its InnoDB
        has the data, so it bootstraps from there or rejoins by IST instead of a
        full copy. `recover`: found now for a node that crashed (its grastate.dat
        says seqno -1; a node stopped in order wrote its position there)."""
        state = self.grastate(port)
        if recover and port not in self.start_positions and state.get("seqno") == "-1" \
                and (self.node_dir(port) / "data" / "ibdata1").exists():
            uuid, seqno = self.recover_position(port)
            if uuid and seqno >= 0:
                self.start_positions[port] = f"--wsrep_start_position={uuid}:{seqno}"
        position = self.start_positions.get(port)
        return (position,) if position else ()

    def donors(self, port: int) -> tuple[str, ...]:
        """--wsrep-sst-donor for a joiner: the synced nodes the front does not
        write to, then any (the trailing comma). A donor leaves the Synced state
        while it sends the writes missed (IST) or a full copy (SST), and the front
        would move off the writer it was."""
        writer = self.front_node() if self.front_pid() is not None else None
        others = [f"node-{p}" for p in self.ports if p not in (port, writer)
                  and self.wsrep(p).get("wsrep_local_state") == "4"]
        return (f"--wsrep-sst-donor={','.join(others)},",) if others else ()

    def wait(self, ports: list[int], size: int, seconds: float, what: str) -> bool:
        """Until every node of `ports` is synced in a component of `size`; False
        after `seconds`, ClusterError as soon as one of them died."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if all(self.synced(port, size) for port in ports):
                return True
            for port in ports:
                if self.pid(port) is None:
                    raise ClusterError(f"MariaDB node {port} exited while {what}: see "
                                       f"{self.node_dir(port)}/mariadbd.log")
            time.sleep(0.25)
        return False

    def bootstrap(self, port: int) -> None:
        """A new primary component from this node alone (--wsrep-new-cluster)."""
        self.say(f"MariaDB cluster: bootstrapping from node {port}")
        self.start(port, "--wsrep-new-cluster", *self.start_position(port))
        if not self.wait([port], 1, 120, "bootstrapping"):
            raise ClusterError(f"MariaDB node {port} did not bootstrap within 120 s: see "
                               f"{self.node_dir(port)}/mariadbd.log")

    def ensure_sst_user(self, port: int) -> None:
        """The user a donor's mariabackup connects as (replicated to every node)."""
        password = self.sst_password()
        statement = (f"CREATE USER IF NOT EXISTS '{SST_USER}'@'localhost' IDENTIFIED BY '{password}'; "
                     f"ALTER USER '{SST_USER}'@'localhost' IDENTIFIED BY '{password}'; "
                     f"GRANT RELOAD, PROCESS, LOCK TABLES, BINLOG MONITOR ON *.* TO '{SST_USER}'@'localhost'")
        if self.sql(port, statement) is None:
            raise ClusterError(f"could not set up the SST user on node {port}")

    def recover_position(self, port: int) -> tuple[str, int]:
        """The node's last committed position (cluster uuid, seqno) as
        mariadbd --wsrep-recover finds it in InnoDB (seqno -1 when it has none)."""
        self.write_config(port)
        logfile = self.node_dir(port) / "mariadbd.log"
        before = logfile.stat().st_size if logfile.exists() else 0
        subprocess.run([MARIADBD, f"--defaults-file={self.cnf(port)}", "--user=root", "--wsrep-recover"],
                       cwd=self.node_dir(port), capture_output=True, timeout=300)
        with open(logfile, "rb") as f:
            f.seek(before)
            found = re.findall(rb"Recovered position: ([0-9a-f-]+):(-?\d+)", f.read())
        return (found[-1][0].decode(), int(found[-1][1])) if found else ("", -1)

    def cold_start(self) -> None:
        """Every node down: the cluster formed again (fresh, after an orderly stop,
        or after a crash), see the module's docstring."""
        states = {port: self.grastate(port) for port in self.ports}
        if not any(states.values()):  # no node was ever in the cluster
            self.bootstrap(self.ports[0])
            return
        safe = [port for port in self.ports if states[port].get("safe_to_bootstrap") == "1"
                and int(states[port].get("seqno", "-1")) >= 0]
        if safe:
            self.bootstrap(max(safe, key=lambda p: int(states[p]["seqno"])))
            return
        if all((self.node_dir(port) / "data" / "gvwstate.dat").exists() for port in self.ports):
            self.say("MariaDB cluster: every node crashed; starting all three to form their last "
                     "primary component again (pc.recovery)")
            for port in self.ports:
                self.start(port)
            if self.wait(self.ports, NODES, RECOVERY_WITHIN_S, "forming again"):
                return
            self.say(f"MariaDB cluster: not formed again within {RECOVERY_WITHIN_S} s; recovering positions")
            self.kill_all()
        positions = dict(zip(self.ports, in_parallel_results(self.recover_position, self.ports), strict=True))
        best = max(self.ports, key=lambda p: positions[p][1])  # the first of the most advanced
        self.say("MariaDB cluster: recovered positions "
                 f"{', '.join(f'{p}: {positions[p][1]}' for p in self.ports)}; node {best} bootstraps")
        grastate = self.node_dir(best) / "data" / "grastate.dat"
        if grastate.exists():
            grastate.write_text(re.sub(r"safe_to_bootstrap:\s*0", "safe_to_bootstrap: 1", grastate.read_text()))
        self.start_positions = {p: f"--wsrep_start_position={u}:{n}" for p, (u, n) in positions.items() if u}
        self.bootstrap(best)

    def kill_all(self) -> None:
        pids = [pid for pid in map(self.pid, self.ports) if pid is not None]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        while any(alive(pid) for pid in pids):
            time.sleep(0.1)

    def start_front(self) -> None:
        """HAProxy on base+3 (deploy/galera-check as its health check), started when
        it is not running; its config written afresh either way."""
        servers = "\n".join(f"    server node-{port} {HOST}:{port} check{' backup' if i else ''}"
                            for i, port in enumerate(self.ports))
        config = self.dir / "haproxy.cfg"
        config.write_text(HAPROXY_CONFIG.format(dir=self.dir, host=HOST, front=self.front, check=CHECK,
                                                servers=servers))
        if self.front_pid() is not None:
            return
        if port_open(self.front):
            raise ClusterError(f"port {self.front} (the front) is in use by a process this script did not start")
        done = subprocess.run(["haproxy", "-f", str(config)], capture_output=True, text=True, timeout=30,
                              start_new_session=True)
        if done.returncode != 0:
            raise ClusterError(f"HAProxy did not start on {self.front}: {done.stderr[-400:]}")

    def up(self) -> None:
        """Installed where missing, every node running and synced in one primary
        component of three (a killed node rejoins by IST, or a full copy), and the
        front running and routing to a synced node."""
        deadline = time.monotonic() + UP_WITHIN_S
        self.ensure_installed()
        self.dir.mkdir(parents=True, exist_ok=True)
        for port in self.ports:
            pid = self.pid(port)
            if pid is not None and stopped(pid):
                os.kill(pid, signal.SIGCONT)
        for port in self.ports:  # one at a time: bootstrap servers run side by side collide on /tmp's temporary tables
            self.init_data(port)
        if not any(self.pid(port) for port in self.ports):
            self.cold_start()
        primary = [port for port in self.ports if self.pid(port) and self.wsrep(port).get("wsrep_cluster_status")
                   == "Primary"]
        if primary:
            self.ensure_sst_user(primary[0])
        # one joiner at a time: the second would otherwise take the first, not yet synced, as its donor
        for port in self.ports:
            if self.pid(port) is None:
                self.say(f"MariaDB cluster: node {port} joins")
                self.start(port)
                size = sum(1 for p in self.ports if self.pid(p) is not None)
                self.wait([port], size, max(1.0, deadline - time.monotonic()), "joining")
        if not self.wait(self.ports, NODES, max(1.0, deadline - time.monotonic()), "forming"):
            from benchmarks.clusters.status import mariadb_status

            raise ClusterError(f"the MariaDB cluster is not whole after {UP_WITHIN_S} s:\n{mariadb_status(self)[1]}")
        self.start_front()
        while self.front_node() is None:
            if time.monotonic() >= deadline:
                raise ClusterError(f"the front on {self.front} routes to no node")
            time.sleep(0.25)
        self.say(f"MariaDB cluster ok on {HOST}:{self.ports[0]}-{self.ports[-1]}, front {HOST}:{self.front}")

    def front_node(self) -> int | None:
        """The node the front sends a new connection to now (its port), None when
        it sends nowhere."""
        out = self.sql(self.front, "SELECT @@port", timeout=5)
        return int(out) if out and out.strip().isdigit() else None

    # --- faults (the tests' and the fault matrix's) ---------------------------------------------

    def signal_node(self, port: int, sig: signal.Signals) -> int:
        pid = self.pid(port)
        if pid is None:
            raise ClusterError(f"MariaDB node {port} is not running")
        os.kill(pid, sig)
        if sig == signal.SIGKILL:
            # the process, and its listening port: the leader thread turns zombie
            # before the others are gone and the sockets closed
            deadline = time.monotonic() + 30
            while (alive(pid) or port_open(port)) and time.monotonic() < deadline:
                time.sleep(0.05)
        return pid

    def node(self, action: str, port: int) -> None:
        """kill (SIGKILL), stop (SIGSTOP), cont (SIGCONT), start (it rejoins; waits
        until synced), term (an orderly stop of that node)."""
        if port not in self.ports:
            raise ClusterError(f"{port} is not a node of the cluster on {self.base}")
        if action == "kill":
            self.signal_node(port, signal.SIGKILL)
        elif action == "stop":
            self.signal_node(port, signal.SIGSTOP)
        elif action == "cont":
            self.signal_node(port, signal.SIGCONT)
        elif action == "term":
            pid = self.pid(port)
            if pid is not None:
                stop_all([pid], grace_s=STOP_GRACE_S, what="mariadbd", nodes="MariaDB", say=self.say)
        elif action == "start":
            if self.pid(port) is None:
                self.start(port)
            size = sum(1 for p in self.ports if self.pid(p) is not None)
            if not self.wait([port], size, UP_WITHIN_S, "rejoining"):
                raise ClusterError(f"MariaDB node {port} is not synced after {UP_WITHIN_S} s")
        else:
            raise ClusterError(f"no node action {action!r}")

    # --- down ----------------------------------------------------------------------------------

    def down(self, wipe: bool = False) -> None:
        """The front and the nodes this runner started stopped (by their pid files),
        their data kept unless `wipe`. One node after the other, the writer last: the
        last to leave is marked safe to bootstrap and has every commit, and the next
        up bootstraps from it (stopped together, none is marked, and the next up
        has to recover their positions)."""
        writer = self.front_node() if self.front_pid() is not None else None
        front = self.front_pid()
        if front is not None:
            stop_all([front], grace_s=10, what="haproxy", nodes="MariaDB front", say=self.say)
        order = sorted(self.ports, key=lambda port: port == writer)
        for port in order:
            pid = self.pid(port)
            if pid is not None:
                stop_all([pid], grace_s=STOP_GRACE_S, what="mariadbd", nodes=f"MariaDB {port}", say=self.say)
            elif port_open(port):
                self.say(f"port {port}: not a node of {self.dir} (no live pid file), left running")
        if wipe:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.say(f"removed {self.dir}: the next up forms a fresh cluster")


def in_parallel_results(call, items: list[int]) -> list[int]:
    results: dict[int, int] = {}
    failed = in_parallel(*(lambda item=item: results.__setitem__(item, call(item)) for item in items))
    for exc in failed:
        if exc is not None:
            raise exc
    return [results[item] for item in items]
