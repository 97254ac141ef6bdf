"""The test bed: the hosts (network namespaces on the bridge skbr0) and the
stores on them, started, checked and stopped.

    host     address      runs
    store1-3 10.77.0.11-13  Redis Cluster: three nodes each (ports 7000-7002),
                            one shard's master and a replica of each other shard
                            (no shard has two nodes on one host)
    mq1-3    10.77.0.21-23  RabbitMQ: one node each, rabbit@<address> (long
                            names), AMQP 5672, distribution 25672, its own epmd
    db1      10.77.0.31     MariaDB on 3306, datadir var/hosts/db1/
    web1-2   10.77.0.41-42  the web tier (python -m seckill_site.serve on 8000),
                            behind HAProxy in the root namespace on 127.0.0.1
    worker1-2 10.77.0.51-52 Celery workers

The app's processes (web, workers, beat) are started by whoever uses the bed
(the fault matrix, the tests: app.py); the bed starts the stores. Galera: add
db2, db3 to HOSTS and start each in `start_db`'s place (the hook is DB_HOSTS)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from benchmarks.clusters.nodes import (
    ClusterError,
    alnum_secret,
    hex_secret,
    installed,
    log,
    made_once,
    pid_file,
    write_private,
)
from benchmarks.clusters.redis_cluster import CONFIG as REDIS_CONFIG, MAX_LAG, MIN_REPLICAS, NODE_TIMEOUT_MS, SLOTS
from benchmarks.hosts import net
from benchmarks.hosts.net import Host

ROOT = Path(__file__).resolve().parents[2]
BED_DIR = ROOT / "var" / "hosts"

HOSTS = [Host(f"store{i}", 10 + i, "store") for i in (1, 2, 3)] + \
        [Host(f"mq{i}", 20 + i, "mq") for i in (1, 2, 3)] + \
        [Host("db1", 31, "db")] + \
        [Host(f"web{i}", 40 + i, "web") for i in (1, 2)] + \
        [Host(f"worker{i}", 50 + i, "worker") for i in (1, 2)]
BY_NAME = {h.name: h for h in HOSTS}
STORES = [h for h in HOSTS if h.role == "store"]
MQS = [h for h in HOSTS if h.role == "mq"]
DB_HOSTS = [h for h in HOSTS if h.role == "db"]   # one MariaDB now; Galera's nodes later
WEBS = [h for h in HOSTS if h.role == "web"]
WORKERS = [h for h in HOSTS if h.role == "worker"]

REDIS_PORTS = (7000, 7001, 7002)
AMQP_PORT, DIST_PORT, DB_PORT, WEB_PORT = 5672, 25672, 3306, 8000
RABBIT_USER = RABBIT_PASSWORD = "seckill"


def host(name: str) -> Host:
    return BY_NAME[name]


def by_ip(ip: str) -> Host | None:
    return next((h for h in HOSTS if h.ip == ip), None)


# --- Redis Cluster ------------------------------------------------------------------------------
# Shard k's master is store<k+1>:7000; its replicas store<k+2>:7001 and store<k+3>:7002 (mod 3).

def redis_nodes() -> list[tuple[Host, int]]:
    return [(h, port) for h in STORES for port in REDIS_PORTS]


def redis_master_of_shard(k: int) -> tuple[Host, int]:
    return STORES[k], 7000


def redis_replicas_of_shard(k: int) -> list[tuple[Host, int]]:
    return [(STORES[(k + 1) % 3], 7001), (STORES[(k + 2) % 3], 7002)]


def redis_password() -> str:
    return made_once(BED_DIR / "redis" / "password", hex_secret, 0o600)


def redis_dir(h: Host, port: int) -> Path:
    return BED_DIR / "redis" / f"{h.name}-{port}"


def redis_pid(h: Host, port: int) -> int | None:
    pid = pid_file(redis_dir(h, port) / "redis.pid")
    return pid if pid and _cmdline(pid).startswith(f"redis-server {h.ip}:{port}") else None


def redis_cli(h: Host, port: int, *args: str, timeout: float = 2) -> str | None:
    """redis-cli from the root namespace (over the bridge); None when it failed."""
    env = dict(os.environ, REDISCLI_AUTH=redis_password())
    try:
        done = subprocess.run(["redis-cli", "-h", h.ip, "-p", str(port), *args], env=env, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return done.stdout.replace("\r", "") if done.returncode == 0 and not done.stdout.startswith("ERR") else None


def redis_info(h: Host, port: int, section: str) -> dict[str, str]:
    out = redis_cli(h, port, *(("cluster", "info") if section == "cluster" else ("info", section))) or ""
    return dict(line.split(":", 1) for line in out.splitlines() if ":" in line)


def redis_url() -> str:
    return f"redis+cluster://:{redis_password()}@" + ",".join(f"{h.ip}:{p}" for h, p in redis_nodes())


def start_redis() -> None:
    for h, port in redis_nodes():
        if redis_pid(h, port):
            continue
        d = redis_dir(h, port)
        d.mkdir(parents=True, exist_ok=True)
        config = REDIS_CONFIG.format(port=port, host=h.ip, password=redis_password(), dir=d,
                                     node_timeout=NODE_TIMEOUT_MS, min_replicas=MIN_REPLICAS, max_lag=MAX_LAG)
        # the address the others and the clients reach it at, in the cluster's gossip and redirects
        config += f"cluster-announce-ip {h.ip}\n"
        write_private(d / "redis.conf", config)
        if subprocess.run(h.cmd("redis-server", str(d / "redis.conf"))).returncode != 0:
            raise ClusterError(f"redis-server {h.name}:{port} did not start: see {d}/redis.log")
    _until(lambda: all(redis_cli(h, p, "ping") == "PONG\n" for h, p in redis_nodes()), 30, "Redis nodes answering")


def form_redis() -> None:
    """Three masters with their slots, then each replica joined to its shard's master."""
    if any(redis_info(h, p, "cluster").get("cluster_slots_assigned") == str(SLOTS) for h, p in redis_nodes()):
        return
    env = dict(os.environ, REDISCLI_AUTH=redis_password())
    masters = [redis_master_of_shard(k) for k in range(3)]
    log("forming the Redis Cluster across store1-3")
    subprocess.run(["redis-cli", "--cluster", "create", *(f"{h.ip}:{p}" for h, p in masters),
                    "--cluster-replicas", "0", "--cluster-yes"], env=env, check=True, stdout=subprocess.DEVNULL)
    for k, (mh, mp) in enumerate(masters):
        master_id = (redis_cli(mh, mp, "cluster", "myid") or "").strip()
        for rh, rp in redis_replicas_of_shard(k):
            subprocess.run(["redis-cli", "--cluster", "add-node", f"{rh.ip}:{rp}", f"{mh.ip}:{mp}",
                            "--cluster-slave", "--cluster-master-id", master_id], env=env, check=True,
                           stdout=subprocess.DEVNULL)


def redis_healthy() -> bool:
    for h, p in redis_nodes():
        if redis_info(h, p, "cluster").get("cluster_state") != "ok":
            return False
        repl = redis_info(h, p, "replication")
        if repl.get("role") == "slave" and repl.get("master_link_status") != "up":
            return False
        if repl.get("role") == "master" and int(repl.get("connected_slaves", "0")) < MIN_REPLICAS:
            return False
    return True


# --- RabbitMQ -----------------------------------------------------------------------------------

RABBIT_BIN = Path("/usr/lib/rabbitmq/bin")
RABBIT_CONFIG = """\
# Written by benchmarks/hosts on every start of this node.
listeners.tcp.default = {ip}:{port}
default_user = {user}
default_pass = {password}
default_user_tags.administrator = false
default_permissions.configure = .*
default_permissions.read = .*
default_permissions.write = .*
# As the local cluster (benchmarks/clusters): a node cut off from the majority
# pauses (closes its clients' connections) rather than serving a split cluster.
cluster_partition_handling = pause_minority
cluster_formation.peer_discovery_backend = classic_config
{peers}
log.console = false
log.file.level = info
"""


def rabbit_name(h: Host) -> str:
    return f"rabbit@{h.ip}"


def rabbit_dir(h: Host) -> Path:
    return BED_DIR / "rabbitmq" / h.name


def rabbit_env(h: Host) -> dict[str, str]:
    d = rabbit_dir(h)
    base = {k: v for k, v in os.environ.items() if k not in ("ERL_FLAGS", "RABBITMQ_ENV_LOADED")}
    return dict(base, HOME=str(BED_DIR / "rabbitmq"), RABBITMQ_CONF_ENV_FILE=f"{d}/rabbitmq-env.conf",
                RABBITMQ_NODENAME=rabbit_name(h), RABBITMQ_USE_LONGNAME="true", RABBITMQ_NODE_IP_ADDRESS=h.ip,
                RABBITMQ_NODE_PORT=str(AMQP_PORT), RABBITMQ_DIST_PORT=str(DIST_PORT),
                RABBITMQ_CONFIG_FILE=f"{d}/rabbitmq.conf", RABBITMQ_ADVANCED_CONFIG_FILE=f"{d}/advanced.config",
                RABBITMQ_ENABLED_PLUGINS_FILE=f"{d}/enabled_plugins", RABBITMQ_MNESIA_BASE=f"{d}/mnesia",
                RABBITMQ_LOG_BASE=f"{d}/log", RABBITMQ_PID_FILE=f"{d}/rabbitmq.pid",
                RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=f"-kernel inet_dist_use_interface {{{h.ip.replace('.', ',')}}}")


def rabbit_pid(h: Host) -> int | None:
    pid = pid_file(rabbit_dir(h) / "rabbitmq.pid")
    if pid is None or "beam" not in _cmdline(pid):
        return None
    return pid if f"RABBITMQ_NODENAME={rabbit_name(h)}" in _environ(pid) else None


def rabbit_ctl(h: Host, tool: str, *args: str, timeout: float = 60, check: bool = False,
               on: Host | None = None) -> subprocess.CompletedProcess:
    """A CLI tool against node `h`, run inside host `on` (h's own by default): its
    distribution reaches the node through that host's network, cuts included."""
    on = on or h
    try:
        done = subprocess.run(on.cmd(str(RABBIT_BIN / tool), "-q", "-l", "-n", rabbit_name(h), *args),
                              env=rabbit_env(h), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        done = subprocess.CompletedProcess([tool], 124, "", "timed out")
    if check and done.returncode != 0:
        raise ClusterError(f"{tool} {' '.join(args)} on {h.name}: {(done.stderr or done.stdout).strip()[-300:]}")
    return done


def start_rabbit() -> None:
    made_once(BED_DIR / "rabbitmq" / ".erlang.cookie", alnum_secret, 0o400)
    peers = "\n".join(f"cluster_formation.classic_config.nodes.{i} = {rabbit_name(h)}" for i, h in enumerate(MQS, 1))
    started = []
    for h in MQS:
        if rabbit_pid(h):
            continue
        d = rabbit_dir(h)
        (d / "mnesia").mkdir(parents=True, exist_ok=True)
        (d / "log").mkdir(exist_ok=True)
        write_private(d / "rabbitmq.conf", RABBIT_CONFIG.format(ip=h.ip, port=AMQP_PORT, user=RABBIT_USER,
                                                                password=RABBIT_PASSWORD, peers=peers))
        write_private(d / "rabbitmq-env.conf", f"NODENAME={rabbit_name(h)}\nUSE_LONGNAME=true\n")
        (d / "enabled_plugins").write_text("[].\n")
        (d / "rabbitmq.pid").unlink(missing_ok=True)
        with open(d / "log" / "startup.log", "ab") as out:
            subprocess.run(h.cmd(str(RABBIT_BIN / "rabbitmq-server"), "-detached"), cwd=d, env=rabbit_env(h),
                           stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        started.append(h.name)
    if started:
        log(f"starting RabbitMQ on {' '.join(started)}")


def rabbit_running(h: Host) -> set[str]:
    """The running nodes in `h`'s view (empty when it does not answer)."""
    done = rabbit_ctl(h, "rabbitmqctl", "cluster_status", "--formatter", "json", timeout=20)
    try:
        return set(json.loads(done.stdout).get("running_nodes", [])) if done.returncode == 0 else set()
    except ValueError:
        return set()


def rabbit_clustered() -> bool:
    return all(rabbit_pid(h) for h in MQS) and rabbit_running(MQS[0]) >= {rabbit_name(h) for h in MQS}


def rabbit_url() -> str:
    return ";".join(f"amqp://{RABBIT_USER}:{RABBIT_PASSWORD}@{h.ip}:{AMQP_PORT}//" for h in MQS)


# --- MariaDB ------------------------------------------------------------------------------------

def db_dir(h: Host) -> Path:
    return BED_DIR / h.name


def db_pid(h: Host) -> int | None:
    pid = pid_file(db_dir(h) / "mariadb.pid")
    return pid if pid and "mariadbd" in _cmdline(pid) else None


def db_url(name: str) -> str:
    return f"mysql://root:@{DB_HOSTS[0].ip}:{DB_PORT}/{name}"


def start_db(h: Host) -> None:
    """One MariaDB on `h` (its own datadir), root reachable from the bed's
    addresses without a password (the bridge is private to this machine)."""
    if db_pid(h):
        return
    d = db_dir(h)
    data = d / "data"
    if not (data / "mysql").exists():
        d.mkdir(parents=True, exist_ok=True)
        log(f"initialising MariaDB's datadir {data}")
        subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root",
                        "--skip-test-db", "--auth-root-authentication-method=socket"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    args = ["mariadbd", "--no-defaults", f"--datadir={data}", f"--socket={d}/mariadb.sock",
            f"--pid-file={d}/mariadb.pid", f"--log-error={d}/mariadb.err", f"--bind-address={h.ip}",
            f"--port={DB_PORT}", "--user=root", "--max-connections=1000", "--innodb-buffer-pool-size=256M",
            "--innodb-flush-log-at-trx-commit=1", "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_unicode_ci", "--transaction-isolation=READ-COMMITTED"]
    subprocess.Popen(h.cmd(*args), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)
    _until(lambda: (d / "mariadb.sock").exists() and db_pid(h) is not None, 60, f"MariaDB on {h.name}")
    grant = (f"CREATE USER IF NOT EXISTS 'root'@'{net.NETWORK}.%'; "
             f"GRANT ALL ON *.* TO 'root'@'{net.NETWORK}.%' WITH GRANT OPTION; FLUSH PRIVILEGES;")
    _until(lambda: subprocess.run(["mariadb", f"--socket={d}/mariadb.sock", "-uroot", "-e", grant],
                                  capture_output=True).returncode == 0, 30, "MariaDB's grants")


def db_answers(h: Host) -> bool:
    return subprocess.run(["mariadb", "-h", h.ip, "-P", str(DB_PORT), "-uroot", "--connect-timeout=2", "-e",
                           "select 1"], capture_output=True).returncode == 0


# --- the bed ------------------------------------------------------------------------------------

def up() -> None:
    """Every host made (idempotent), then the stores started and waited for."""
    net.ensure_tools()
    for cmd, pkg in (("redis-server", "redis-server"), ("mariadbd", "mariadb-server")):
        if not installed(cmd):
            from benchmarks.clusters.nodes import apt_install

            apt_install(pkg)
    if not os.access(RABBIT_BIN / "rabbitmq-server", os.X_OK):
        from benchmarks.clusters.nodes import apt_install

        apt_install("rabbitmq-server")
    net.make_bridge()
    for h in HOSTS:
        h.make()
    BED_DIR.mkdir(parents=True, exist_ok=True)
    start_rabbit()  # the slowest to boot: first
    start_redis()
    form_redis()
    for h in DB_HOSTS:
        start_db(h)
    _until(redis_healthy, 60, "the Redis Cluster healthy")
    _until(rabbit_clustered, 180, "the RabbitMQ nodes clustered")
    log(f"test bed up: {len(HOSTS)} hosts on {net.BRIDGE} {net.NETWORK}.0/24")


def down(wipe: bool = False) -> list[str]:
    removed = net.remove_all()
    if wipe:
        shutil.rmtree(BED_DIR, ignore_errors=True)
    return removed


def status() -> tuple[bool, str]:
    rows = [f"bridge {net.BRIDGE}: {'up ' + net.BRIDGE_IP if net.bridge_exists() else 'absent'}",
            f"{'host':<8} {'address':<13} {'up':<4} nodes / cuts"]
    present = set(net.namespaces())
    ok = bool(present)
    for h in HOSTS:
        made = h.ns in present
        ok &= made
        nodes = []
        if made and h.role == "store":
            for port in REDIS_PORTS:
                role = redis_info(h, port, "replication").get("role", "down") if redis_pid(h, port) else "down"
                nodes.append(f"redis:{port} {role}")
        elif made and h.role == "mq":
            nodes.append(f"{rabbit_name(h)} {'running' if rabbit_pid(h) else 'down'}")
        elif made and h.role == "db":
            nodes.append(f"mariadb:{DB_PORT} {'running' if db_pid(h) else 'down'}")
        elif made:
            pids = net.run("ip", "netns", "pids", h.ns, check=False).stdout.split()
            nodes.append(f"{len(pids)} process(es)")
        cuts = h.dropped() if made else []
        nodes.append("cut from " + ", ".join(_named(c) for c in cuts) if cuts else "no cuts")
        rows.append(f"{h.name:<8} {h.ip:<13} {'yes' if made else 'no':<4} {'; '.join(nodes)}")
    if ok:
        redis_ok, rabbit_ok = redis_healthy(), rabbit_clustered()
        ok = redis_ok and rabbit_ok and all(db_answers(h) for h in DB_HOSTS)
        rows.append(f"redis cluster {'ok' if redis_ok else 'NOT ok'}; "
                    f"rabbitmq {'clustered' if rabbit_ok else 'NOT ok'}")
    rows.append("test bed ok" if ok else "test bed NOT ok")
    return ok, "\n".join(rows)


def env() -> dict[str, str]:
    """The environment a process uses the bed's stores with."""
    return {"REDIS_URL": redis_url(), "CELERY_BROKER_URL": rabbit_url(), "SECKILL_HOSTS_BED": "1"}


def _named(address: str) -> str:
    h = by_ip(address)
    return h.name if h else ("root namespace" if address == net.BRIDGE_IP else address)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _environ(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _until(check, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.3)
    raise ClusterError(f"{what}: not within {seconds:.0f} s")
