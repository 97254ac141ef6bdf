"""The local MariaDB Galera cluster (benchmarks/clusters/mariadb_cluster.py) and
its HAProxy front (deploy/galera-check): three synced nodes, one writer at a
time, a write on every node, and the front moving to a synced node when the
writer is killed or paused; a killed node rejoins by IST, and a crash of every
node loses nothing committed.

Runs in scripts/test's cluster leg (DATABASE_URL names the front of the cluster
SECKILL_MARIADB_CLUSTER_BASE says); skipped elsewhere. The tests use a schema of
their own through raw connections, not the Django test database, and close
Django's connections at the end: the front shuts the sessions of a node it
marks down."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid

import MySQLdb
import pytest

from testsupport import ROOT, wait_until

pytestmark = pytest.mark.mariadb_cluster

BASE = int(os.environ.get("SECKILL_MARIADB_CLUSTER_BASE") or 0)
NODES = [BASE, BASE + 1, BASE + 2]
FRONT = BASE + 3
SCHEMA = "seckill_galera_test"
# generous: a dead node is evicted after evs.suspect_timeout (5 s), a rejoin may
# need a full copy on a busy machine
DEADLINE_S = 120


def runner(*args: str, timeout: float = 300) -> str:
    """python -m benchmarks.clusters mariadb --base BASE ARGS; fails the test when it fails."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.clusters", "mariadb", "--base", str(BASE), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def connect(port: int, **kwargs) -> MySQLdb.Connection:
    return MySQLdb.connect(host="127.0.0.1", port=port, user="root", password="", connect_timeout=3,
                           read_timeout=30, write_timeout=30, autocommit=True, **kwargs)


def query(port: int, sql: str, *params) -> tuple:
    conn = connect(port)
    try:
        cur = conn.cursor()
        cur.execute(sql, params or None)
        return cur.fetchall()
    finally:
        conn.close()


def attempt(port: int, sql: str, *params) -> tuple | None:
    """query(), or None when the node refuses or does not answer (yet)."""
    try:
        return query(port, sql, *params)
    except MySQLdb.Error:
        return None


def wsrep(port: int) -> dict[str, str]:
    return dict(attempt(port, "SHOW GLOBAL STATUS LIKE 'wsrep_%'") or ())


def synced(port: int, size: int = 3) -> bool:
    status = wsrep(port)
    return (status.get("wsrep_cluster_status"), status.get("wsrep_local_state"), status.get("wsrep_ready"),
            status.get("wsrep_cluster_size")) == ("Primary", "4", "ON", str(size))


def writer() -> int | None:
    """The node a new connection through the front lands on."""
    rows = attempt(FRONT, "SELECT @@port")
    return int(rows[0][0]) if rows else None


def write(tag: str) -> bool:
    """One row through the front; False when it was refused (the front or the node in between)."""
    return attempt(FRONT, f"INSERT INTO {SCHEMA}.t (tag) VALUES (%s)", tag) is not None


def has(port: int, tag: str) -> bool:
    rows = attempt(port, f"SELECT COUNT(*) FROM {SCHEMA}.t WHERE tag = %s", tag)
    return bool(rows) and rows[0][0] == 1


def log_size(port: int) -> int:
    path = runner_dir() / str(port) / "mariadbd.log"
    return path.stat().st_size if path.exists() else 0


def log_since(port: int, offset: int) -> str:
    with open(runner_dir() / str(port) / "mariadbd.log", "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def runner_dir():
    from benchmarks.clusters import GaleraCluster

    return GaleraCluster(BASE).dir


@pytest.fixture(scope="module")
def cluster():
    """The cluster whole (a run that died may have left a node down), a schema of
    the tests' own; whole again afterwards, the schema dropped."""
    runner("up")
    query(FRONT, f"CREATE DATABASE IF NOT EXISTS {SCHEMA}")
    query(FRONT, f"CREATE TABLE IF NOT EXISTS {SCHEMA}.t (id BIGINT AUTO_INCREMENT PRIMARY KEY, "
                 "tag VARCHAR(64) NOT NULL UNIQUE) ENGINE=InnoDB")
    yield
    runner("up")
    attempt(FRONT, f"DROP DATABASE IF EXISTS {SCHEMA}")
    from django.db import connections

    connections.close_all()  # the front may have cut them


@pytest.fixture
def whole(cluster):
    """Each test starts on three synced nodes and a front that routes."""
    if not all(synced(port) for port in NODES) or writer() is None:
        runner("up")


def test_three_nodes_are_synced_in_one_primary_component(whole):
    states = [wsrep(port) for port in NODES]
    for port, state in zip(NODES, states, strict=True):
        assert (state["wsrep_cluster_status"], state["wsrep_local_state_comment"], state["wsrep_ready"],
                state["wsrep_cluster_size"]) == ("Primary", "Synced", "ON", "3"), port
    assert len({state["wsrep_cluster_state_uuid"] for state in states}) == 1
    # the durable settings of deploy/galera.cnf are the ones the nodes run with
    for port in NODES:
        (flush, binlog, sync, wait, autoinc, fmt), = query(
            port, "SELECT @@innodb_flush_log_at_trx_commit, @@log_bin, @@sync_binlog, @@wsrep_sync_wait, "
                  "@@innodb_autoinc_lock_mode, @@binlog_format")
        assert (flush, binlog, sync, wait, autoinc, fmt) == (1, 1, 1, 1, 2, "ROW"), port
        assert query(port, "SELECT @@bind_address")[0][0] == "127.0.0.1"
    status = subprocess.run([sys.executable, "-m", "benchmarks.clusters", "mariadb", "--base", str(BASE), "status"],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"front {FRONT} -> {writer()}" in status.stdout


def test_the_front_sends_every_connection_to_one_node(whole):
    conns = [connect(FRONT) for _ in range(12)]
    try:
        ports = set()
        for conn in conns:
            cur = conn.cursor()
            cur.execute("SELECT @@port")
            ports.add(cur.fetchone()[0])
    finally:
        for conn in conns:
            conn.close()
    assert len(ports) == 1 and ports <= set(NODES), ports
    assert ports == {int(runner("writer"))}


def test_a_write_through_the_front_is_on_every_node(whole):
    tag = uuid.uuid4().hex
    assert write(tag)
    # wsrep_sync_wait = 1: a read on any node waits for what the cluster committed
    assert [has(port, tag) for port in NODES] == [True, True, True]


def test_a_killed_writer_moves_the_front_and_rejoins_by_ist(whole):
    old = writer()
    before = uuid.uuid4().hex
    assert write(before)
    runner("node", "kill", str(old))
    new = wait_until(lambda: (w := writer()) not in (None, old) and w, timeout=DEADLINE_S,
                     what="the front on another node")
    # the survivors evict the dead node (evs.suspect_timeout) and carry on as two
    wait_until(lambda: synced(new, size=2), timeout=DEADLINE_S, what="a primary component of two")
    after = uuid.uuid4().hex
    wait_until(lambda: write(after), timeout=DEADLINE_S, what="a write through the front after the kill")
    assert has(FRONT, before) and has(FRONT, after)

    offset = log_size(old)
    runner("node", "start", str(old))
    wait_until(lambda: all(synced(port) for port in NODES), timeout=DEADLINE_S, what="three synced nodes again")
    assert has(old, after)
    rejoin = log_since(old, offset)
    assert "IST received" in rejoin and "Proceeding with SST" not in rejoin, rejoin[-3000:]
    # sticky: the old writer is back and synced, the front stays where it moved
    assert writer() == new


def test_a_paused_writer_moves_the_front_and_catches_up(whole):
    old = writer()
    runner("node", "stop", str(old))
    try:
        new = wait_until(lambda: (w := writer()) not in (None, old) and w, timeout=DEADLINE_S,
                         what="the front on another node")
        tag = uuid.uuid4().hex
        wait_until(lambda: write(tag), timeout=DEADLINE_S, what="a write through the front while the writer sleeps")
    finally:
        runner("node", "cont", str(old))
    wait_until(lambda: all(synced(port) for port in NODES), timeout=DEADLINE_S, what="three synced nodes again")
    assert has(old, tag)
    # one writer at a time: every new connection through the front lands on the
    # same synced node (which one may move again while the old one catches up)
    landed = {writer() for _ in range(5)}
    assert len(landed) == 1 and None not in landed and synced(landed.pop()), (old, new)


def test_a_crash_of_every_node_forms_the_cluster_again_with_the_data(whole):
    tags = [uuid.uuid4().hex for _ in range(5)]
    for tag in tags:
        assert write(tag)
    for port in NODES:
        runner("node", "kill", str(port))
    assert writer() is None
    runner("up")
    assert all(synced(port) for port in NODES)
    for port in NODES:
        assert all(has(port, tag) for tag in tags), port
    after = uuid.uuid4().hex
    assert write(after) and has(FRONT, after)
