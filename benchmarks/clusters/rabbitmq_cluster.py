"""The local RabbitMQ cluster: 3 nodes of the Debian package clustered on
127.0.0.1:<base>..<base>+2 (5681 by default), each with its own directory
var/cluster/rabbitmq/<port>/ (rabbitmq.conf, rabbitmq-env.conf, mnesia/, log/,
rabbitmq.pid) and one Erlang cookie of their own in
var/cluster/rabbitmq/.erlang.cookie; another base has
var/cluster/rabbitmq-<base>/. The node on 5672 is never touched.

Each node is started with /usr/lib/rabbitmq/bin/rabbitmq-server (the /usr/sbin
wrapper switches to the rabbitmq user and writes one startup log for all) and
an environment of its own: /etc/rabbitmq/rabbitmq-env.conf names the machine's
node rabbit@localhost and /etc/rabbitmq/rabbitmq.conf pins its listener to 5672,
so neither may apply. HOME is the cluster's directory for the servers and for
every CLI call alike: its .erlang.cookie is what lets them talk, and the
machine's node (whose cookie is /var/lib/rabbitmq's) cannot be reached from
here by mistake."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from benchmarks.clusters.nodes import (
    CLUSTER_DIR,
    HOST,
    ClusterError,
    Log,
    alnum_secret,
    apt_install,
    in_parallel,
    log,
    made_once,
    pid_file,
    port_open,
    proc_text,
    stop_all,
    wait_port,
    write_private,
)

DEFAULT_BASE = 5681
NODES = 3
BIN = Path("/usr/lib/rabbitmq/bin")
UP_WITHIN_S = 120
STOP_GRACE_S = 30

CONFIG = """\
# Written by benchmarks/clusters on every start of this node: edit rabbitmq_cluster.py instead.
listeners.tcp.local = {host}:{port}
# The user of a fresh node; a node that joins takes the cluster's users instead
# (ensure_user makes sure of it afterwards).
default_user = {user}
default_pass = {password}
# no administrator tag: the app needs its vhost's permissions only (as in compose)
default_user_tags.administrator = false
default_permissions.configure = .*
default_permissions.read = .*
default_permissions.write = .*
# A node cut off from the majority pauses rather than serving a split cluster;
# quorum queues follow their own majority anyway.
cluster_partition_handling = pause_minority
log.console = false
log.file.level = info
"""
# The same as the environment env() gives, for anything that reads the file
# alone; the distribution listens on loopback only, as the machine's node does.
ENV_FILE = """\
# Written by benchmarks/clusters: this node's environment, instead of /etc/rabbitmq/rabbitmq-env.conf.
NODENAME={name}
NODE_IP_ADDRESS={host}
NODE_PORT={port}
DIST_PORT={dist}
CONFIG_FILE={dir}/rabbitmq.conf
ADVANCED_CONFIG_FILE={dir}/advanced.config
ENABLED_PLUGINS_FILE={dir}/enabled_plugins
MNESIA_BASE={dir}/mnesia
LOG_BASE={dir}/log
PID_FILE={dir}/rabbitmq.pid
ERL_EPMD_ADDRESS=127.0.0.1
SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {{127,0,0,1}}"
"""


def dist_port(port: int) -> int:
    """Erlang distribution 20000 above the AMQP port, as RabbitMQ's default is
    (5672 -> 25672), so the three nodes and the machine's never share one."""
    return port + 20000


class RabbitCluster:
    """The cluster on `base` (SECKILL_RABBITMQ_CLUSTER_BASE moves it), its user
    SECKILL_RABBITMQ_USER / SECKILL_RABBITMQ_PASSWORD (seckill/seckill)."""

    def __init__(self, base: int = DEFAULT_BASE, *, directory: Path | None = None, say: Log = log):
        self.base = base
        self.ports = [base + i for i in range(NODES)]
        self.dir = directory or (CLUSTER_DIR / "rabbitmq" if base == DEFAULT_BASE
                                 else CLUSTER_DIR / f"rabbitmq-{base}")
        self.user = os.environ.get("SECKILL_RABBITMQ_USER") or "seckill"
        self.password = os.environ.get("SECKILL_RABBITMQ_PASSWORD") or "seckill"
        # Plugins enabled on every node (a plugin must be on every node of a
        # cluster before it is used). None by default: the confirm partitions
        # are routed by the publisher over a direct exchange, so they need no
        # consistent-hash exchange.
        self.plugins = os.environ.get("SECKILL_RABBITMQ_PLUGINS", "")
        self.say = say

    def url(self) -> str:
        """CELERY_BROKER_URL of this cluster: every node's URL, joined by ';'."""
        return ";".join(f"amqp://{self.user}:{self.password}@{HOST}:{port}//" for port in self.ports)

    # --- one node ----------------------------------------------------------------------------

    @staticmethod
    def node_name(port: int) -> str:
        return f"seckill-{port}@localhost"

    def node_dir(self, port: int) -> Path:
        return self.dir / str(port)

    def env(self, port: int) -> dict[str, str]:
        """The environment a node and the CLI calls about it run with."""
        directory = self.node_dir(port)
        base = {k: v for k, v in os.environ.items() if k not in ("ERL_FLAGS", "RABBITMQ_ENV_LOADED")}
        return dict(base, HOME=str(self.dir), RABBITMQ_CONF_ENV_FILE=f"{directory}/rabbitmq-env.conf",
                    RABBITMQ_NODENAME=self.node_name(port), RABBITMQ_NODE_IP_ADDRESS=HOST,
                    RABBITMQ_NODE_PORT=str(port), RABBITMQ_DIST_PORT=str(dist_port(port)),
                    RABBITMQ_CONFIG_FILE=f"{directory}/rabbitmq.conf",
                    RABBITMQ_ADVANCED_CONFIG_FILE=f"{directory}/advanced.config",
                    RABBITMQ_ENABLED_PLUGINS_FILE=f"{directory}/enabled_plugins",
                    RABBITMQ_MNESIA_BASE=f"{directory}/mnesia", RABBITMQ_LOG_BASE=f"{directory}/log",
                    RABBITMQ_PID_FILE=f"{directory}/rabbitmq.pid", ERL_EPMD_ADDRESS="127.0.0.1")

    def ctl(self, port: int, tool: str, *args: str, timeout: float = 60,
            check: bool = True) -> subprocess.CompletedProcess:
        """A CLI tool (rabbitmqctl, rabbitmq-queues ...) against the node on
        `port`, its output captured; ClusterError when it fails and `check`."""
        try:
            done = subprocess.run([str(BIN / tool), "-q", "-n", self.node_name(port), *args], env=self.env(port),
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            done = subprocess.CompletedProcess([tool, *args], 124, "", f"{tool} timed out after {timeout:.0f} s")
        except OSError as exc:  # no such tool (the package is not installed)
            done = subprocess.CompletedProcess([tool, *args], 127, "", str(exc))
        if check and done.returncode != 0:
            said = (done.stderr or done.stdout).strip()[-400:]
            raise ClusterError(f"{tool} {' '.join(args)} on {port} failed: {said}")
        return done

    def pid(self, port: int) -> int | None:
        """Our node on `port`, None when it is not running: a pid file left by a
        SIGKILL, or its pid reused, counts only while that process is a beam
        running this node (its name is in its environment)."""
        pid = pid_file(self.node_dir(port) / "rabbitmq.pid")
        if pid is None or "beam" not in proc_text(pid, "cmdline"):
            return None
        named = f"RABBITMQ_NODENAME={self.node_name(port)}" in proc_text(pid, "environ").splitlines()
        return pid if named else None

    def running(self) -> list[int]:
        return [port for port in self.ports if self.pid(port) is not None]

    def write_config(self, port: int) -> None:
        """rabbitmq.conf holds the user's password: the owner's only, as the cookie is."""
        directory = self.node_dir(port)
        (directory / "mnesia").mkdir(parents=True, exist_ok=True)
        (directory / "log").mkdir(exist_ok=True)
        write_private(directory / "rabbitmq.conf", CONFIG.format(host=HOST, port=port, user=self.user,
                                                                 password=self.password))
        write_private(directory / "rabbitmq-env.conf", ENV_FILE.format(
            name=self.node_name(port), host=HOST, port=port, dist=dist_port(port), dir=directory))
        (directory / "enabled_plugins").write_text(f"[{self.plugins.replace(' ', ',')}].\n")

    # --- up ------------------------------------------------------------------------------------

    def ports_taken(self) -> bool:
        """Any of the three ports, or their distribution ports, in use by anything."""
        return any(port_open(port) or port_open(dist_port(port)) for port in self.ports)

    def start_nodes(self) -> None:
        """Every node that is not running started, all at once (a node that was
        stopped with the others waits at boot for the peers it last saw);
        -detached: the nodes outlive this process."""
        for port in self.ports:
            if self.pid(port) is None and (port_open(port) or port_open(dist_port(port))):
                raise ClusterError(f"port {port} or {dist_port(port)} is in use by a process this script did not "
                                   "start: stop it first")
        made_once(self.dir / ".erlang.cookie", alnum_secret, 0o400)
        started = []
        for port in self.ports:
            if self.pid(port) is not None:
                continue
            self.write_config(port)
            (self.node_dir(port) / "rabbitmq.pid").unlink(missing_ok=True)
            with open(self.node_dir(port) / "log" / "startup.log", "ab") as out:
                subprocess.run([str(BIN / "rabbitmq-server"), "-detached"], cwd=self.node_dir(port),
                               env=self.env(port), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                               start_new_session=True)
            started.append(port)
        if not started:
            return
        self.say(f"starting RabbitMQ node(s) {' '.join(map(str, started))}")
        for port in started:
            try:
                wait_port(port, f"RabbitMQ node {port}", 120)
            except ClusterError as exc:
                raise ClusterError(f"{exc}; see {self.node_dir(port)}/log/") from None

    def view(self, port: int) -> set[tuple[str, str]]:
        """That node's cluster view: ("running", node) and ("disk", node) pairs; empty when it does not answer."""
        done = self.ctl(port, "rabbitmqctl", "cluster_status", "--formatter", "json", check=False)
        try:
            data = json.loads(done.stdout) if done.returncode == 0 else {}
        except ValueError:
            return set()
        return ({("running", n) for n in data.get("running_nodes", [])}
                | {("disk", n) for n in data.get("disk_nodes", [])})

    def form(self) -> None:
        """Every node that is not a member joined to the cluster of the others:
        the node whose view has the most members is the cluster; a node that
        sees only itself (fresh, or wiped) joins it."""
        views: dict[int, set[tuple[str, str]]] = {}
        in_parallel(*(lambda port=port: views.__setitem__(port, self.view(port)) for port in self.ports))
        ref, most = None, 0
        for port in self.ports:
            members = sum(1 for kind, _ in views.get(port, ()) if kind == "disk")
            if members > most:
                ref, most = port, members
        if ref is None:
            raise ClusterError("no RabbitMQ node answers cluster_status")
        joining = [port for port in self.ports if port != ref and ("disk", self.node_name(ref)) not in views[port]]
        if joining:
            self._join(ref, joining, views[ref])

    def _join(self, ref: int, joining: list[int], members: set[tuple[str, str]]) -> None:
        self.say(f"joining RabbitMQ node(s) {' '.join(map(str, joining))} to the cluster of {ref}")
        for port in joining:  # a wiped node the cluster still lists as a member is forgotten first
            if ("disk", self.node_name(port)) in members:
                self.ctl(port, "rabbitmqctl", "stop_app")
                self.ctl(ref, "rabbitmqctl", "forget_cluster_node", self.node_name(port), check=False)
        in_parallel(*(lambda port=port: self._reset(port) for port in joining))
        for port in joining:  # one at a time: each join changes the cluster's schema
            try:
                self.ctl(port, "rabbitmqctl", "join_cluster", self.node_name(ref))
            except ClusterError as exc:
                raise ClusterError(f"{exc}\nnode {port} did not join {ref}: bash scripts/cluster down --wipe, "
                                   "then up, starts afresh") from None
        in_parallel(*(lambda port=port: self.ctl(port, "rabbitmqctl", "start_app", check=False) for port in joining))
        for port in joining:
            wait_port(port, f"RabbitMQ node {port}", 60)

    def _reset(self, port: int) -> None:
        """The node emptied for its join: its app stopped, its data gone."""
        self.ctl(port, "rabbitmqctl", "stop_app")
        self.ctl(port, "rabbitmqctl", "reset")

    def clustered(self) -> bool:
        """Every node running, and the first node's view has all of them running."""
        if any(self.pid(port) is None for port in self.ports):
            return False
        view = self.view(self.ports[0])
        return all(("running", self.node_name(port)) in view for port in self.ports)

    def ensure_user(self) -> None:
        """The cluster's user, with every permission on "/" and no tags: not an administrator."""
        port = self.ports[0]
        if self.ctl(port, "rabbitmqctl", "authenticate_user", self.user, self.password, check=False).returncode == 0:
            return
        self.say(f"RabbitMQ cluster: setting up user {self.user}")
        if self.ctl(port, "rabbitmqctl", "add_user", self.user, self.password, check=False).returncode != 0:
            self.ctl(port, "rabbitmqctl", "change_password", self.user, self.password)
        self.ctl(port, "rabbitmqctl", "set_user_tags", self.user)
        self.ctl(port, "rabbitmqctl", "set_permissions", "-p", "/", self.user, ".*", ".*", ".*")

    def grow(self) -> None:
        """A replica of every quorum queue on every node. RabbitMQ 3.10 places a
        quorum queue's replicas when it is declared and never again: one declared
        before the others joined (or while a node was being replaced) stays short
        of replicas until grown. A no-op for queues that have them; a queue that
        cannot grow now is grown by the next up."""
        in_parallel(*(lambda port=port: self.ctl(port, "rabbitmq-queues", "grow", self.node_name(port), "all",
                                                 check=False) for port in self.ports))

    def up(self) -> None:
        """Installed where missing, every node running and clustered (a killed or
        fresh node rejoins), the user set up and every quorum queue grown."""
        deadline = time.monotonic() + UP_WITHIN_S
        if not os.access(BIN / "rabbitmq-server", os.X_OK):
            apt_install("rabbitmq-server", say=self.say)
        self.start_nodes()
        self.form()
        while not self.clustered():
            if time.monotonic() >= deadline:
                from benchmarks.clusters.status import rabbitmq_status

                raise ClusterError(f"the RabbitMQ cluster is not clustered after {UP_WITHIN_S} s:\n"
                                   f"{rabbitmq_status(self)[1]}")
            time.sleep(0.5)
        user, _ = in_parallel(self.ensure_user, self.grow)
        if user is not None:
            raise user
        self.say(f"RabbitMQ cluster ok on {HOST}:{self.ports[0]}-{self.ports[-1]}")

    # --- down ----------------------------------------------------------------------------------

    def down(self, wipe: bool = False) -> None:
        """The nodes this runner started stopped (by their pid files), their data
        kept unless `wipe` (mnesia/: the next up brings back the same cluster)."""
        pids = []
        for port in self.ports:
            pid = self.pid(port)
            if pid is not None:
                pids.append(pid)
            elif port_open(port):
                self.say(f"port {port}: not a node of {self.dir} (no live pid file), left running")
        stop_all(pids, grace_s=STOP_GRACE_S, what="RabbitMQ node", nodes="RabbitMQ", say=self.say)
        if wipe:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.say(f"removed {self.dir}: the next up forms a fresh cluster")
