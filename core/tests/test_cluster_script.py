"""`bash scripts/cluster status` tells the truth about the local Redis Cluster and
RabbitMQ cluster: what it prints and how it exits agree with what the nodes
themselves answer.
Runs in scripts/test's cluster leg, which starts the cluster (SECKILL_TEST_CLUSTER=1);
skipped elsewhere."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BASE = int(os.environ.get("SECKILL_REDIS_CLUSTER_BASE", "7000"))
PORTS = [str(port) for port in range(BASE, BASE + 9)]
# port, pid, running|down, role ("master", "replica of 7001", a stopped node's
# "... (fail)"), the node's own cluster_state, a master's slots
ROW = re.compile(r"^(\d+)\s+(\S+)\s+(running|down)\s+(master|replica of \d+|\S+)(?: \(p?fail\))?\s+(\S+)\s*(.*)$")

pytestmark = [pytest.mark.redis_cluster,
              pytest.mark.skipif(os.environ.get("SECKILL_TEST_CLUSTER") != "1",
                                 reason="needs SECKILL_TEST_CLUSTER=1 and bash scripts/cluster up")]


def cluster_info(port: str) -> dict[str, str]:
    from django.conf import settings

    # the cluster's password, from REDIS_URL as the app has it (never in argv)
    out = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", port, "cluster", "info"],
                         env=dict(os.environ, REDISCLI_AUTH=settings.REDIS_CLUSTER_PASSWORD or ""),
                         capture_output=True, text=True, timeout=10, check=True).stdout
    return dict(line.split(":", 1) for line in out.split() if ":" in line)


def test_status_agrees_with_cluster_info():
    status = subprocess.run(["bash", "scripts/cluster", "status"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    info = cluster_info(PORTS[0])
    redis_part = status.stdout.split("\n\n")[0]  # the RabbitMQ cluster's rows follow a blank line
    rows = {m[1]: m for m in map(ROW.match, redis_part.splitlines()) if m}

    assert sorted(rows) == PORTS, status.stdout
    assert rows[PORTS[0]][5] == info["cluster_state"], status.stdout
    masters = [row for row in rows.values() if row[4] == "master" and row[3] == "running" and row[6]]
    assert len(masters) == int(info["cluster_size"]), status.stdout
    assert sum(row[3] == "running" for row in rows.values()) <= int(info["cluster_known_nodes"])
    # exit 0 only for a cluster that serves all 16384 slots, and the cluster is up here
    assert (info["cluster_state"], info["cluster_slots_ok"]) == ("ok", "16384")
    assert status.returncode == 0, status.stdout + status.stderr


RABBIT_BASE = int(os.environ.get("SECKILL_RABBITMQ_CLUSTER_BASE", "5681"))
RABBIT_ROW = re.compile(r"^(\d+)\s+(\S+)\s+(running|down)\s+(seckill-\d+@\S+)\s+(.*)$")


def test_status_shows_the_rabbitmq_nodes_as_clustered():
    status = subprocess.run(["bash", "scripts/cluster", "status"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    rabbit_part = status.stdout.split("\n\n", 1)[1]
    rows = {m[1]: m for m in map(RABBIT_ROW.match, rabbit_part.splitlines()) if m}
    assert sorted(rows) == [str(p) for p in range(RABBIT_BASE, RABBIT_BASE + 3)], status.stdout
    for port, row in rows.items():
        assert row[3] == "running" and row[5] == "running member", status.stdout
        # the pid shown is the node's own: it answers on that port
        with open(f"/proc/{row[2]}/environ", "rb") as f:
            assert f"RABBITMQ_NODE_PORT={port}".encode() in f.read().split(b"\0")
    assert "rabbitmq cluster ok" in rabbit_part
