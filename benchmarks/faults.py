"""Faults landed on the real servers: the one definition the tests and the fault
matrix (chaos.py) share. Each waits until the server is back before returning.

They act on the machine's own servers (every database and queue on them), so
run them only where nothing else relies on those servers at that moment.
"""
from __future__ import annotations

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
                    "--save", "", "--appendonly", "no", "--dir", "/tmp", "--logfile", "/tmp/seckill-fault-redis.log"],
                   check=True, timeout=30)
    _wait(redis_ping, 30, "Redis")


def redis_restart_empty(down_s: float = 0.0) -> None:
    """Redis killed and started again without persistence: every key is gone."""
    redis_stop()
    time.sleep(down_s)
    redis_start_empty()


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
