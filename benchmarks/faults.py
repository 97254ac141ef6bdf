"""Faults landed on the machine's own servers (MariaDB, Redis on 6379, RabbitMQ on
5672): the one definition the tests and the fault matrix (benchmarks.chaos)
share. Each waits until the server is back before returning. (The local
clusters' nodes are faulted by benchmarks/chaos/nodes.py.)

They act on the machine's own servers (every database and queue on them), so
run them only where nothing else relies on those servers at that moment.
"""
from __future__ import annotations

import os
import socket
import subprocess
import time

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


def _redis_cli(*args: str) -> str:
    return subprocess.run(["redis-cli", "-p", str(REDIS_PORT), *args], check=True, capture_output=True, text=True,
                          timeout=30).stdout.strip()


SNAPSHOT_FILE = "seckill-fault.rdb"


def redis_save_snapshot() -> str:
    """An RDB file of what Redis holds now (BGSAVE, waited for, then moved to a
    name of our own so no later start loads it by accident). Returns its path,
    for `redis_restart_from`. (dir and dbfilename are protected configs in
    Redis 7: read, never set.)"""

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
    # The server of its pid file only: --exec alone counts any mariadbd as this one
    # running, a node of a local database cluster (bash scripts/cluster) too.
    subprocess.run(["start-stop-daemon", "--start", "--oknodo", "--background", "--pidfile",
                    "/run/mysqld/mysqld.pid", "--exec", "/usr/sbin/mariadbd", "--", "--user=mysql"], check=True,
                   timeout=30)
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
