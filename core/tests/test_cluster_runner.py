"""The local clusters' runner (benchmarks/clusters, behind `bash scripts/cluster`
and the shell names of scripts/cluster.sh) without a cluster: how it reads the
nodes' answers, how it stops nodes, and its command line. The real clusters
are in core/tests/test_cluster_script.py (scripts/test's cluster leg)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.clusters import RabbitCluster, RedisCluster, nodes, redis_cluster
from benchmarks.clusters.__main__ import _pick_base

ROOT = Path(__file__).resolve().parents[2]

# CLUSTER NODES of a cluster where kills and failovers left master b with three
# replicas and master c with one (a: 7000, b: 7001, c: 7002)
NODES = """\
a 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460
b 127.0.0.1:7001@17001 master - 0 0 2 connected 5461-10922
c 127.0.0.1:7002@17002 master - 0 0 3 connected 10923-16383
d 127.0.0.1:7003@17003 slave a 0 0 1 connected
e 127.0.0.1:7004@17004 slave a 0 0 1 connected
f 127.0.0.1:7005@17005 slave b 0 0 2 connected
g 127.0.0.1:7006@17006 slave b 0 0 2 connected
h 127.0.0.1:7007@17007 slave b 0 0 2 connected
i 127.0.0.1:7008@17008 slave c 0 0 3 connected
j :0@0 slave,fail,noaddr c 0 0 3 disconnected
"""


def test_a_replica_moves_from_a_master_with_too_many_to_one_with_too_few():
    rows = [line.split() for line in NODES.splitlines()]
    assert redis_cluster._replica_to_move(rows) == (7005, "c")  # b's first replica follows c
    balanced = [r if r[0] != "f" else [*r[:3], "c", *r[4:]] for r in rows]
    assert redis_cluster._replica_to_move(balanced) is None
    # a master with no slots (a resumed old master, demoted in all but name) needs no replica
    assert redis_cluster._replica_to_move([r for r in rows if r[0] not in ("i",)]) == (7005, "c")


def test_every_slot_counted_once_and_migrations_not_at_all():
    assert redis_cluster.slots_of(["0-5460", "5461-10922", "10923-16383"]) == 16384
    # a resumed old master still claiming its slots hides no gap
    assert redis_cluster.slots_of(["0-5460", "0-5460", "10923-16383"]) == 16384 - 5462
    assert redis_cluster.slots_of(["7", "[8->-abc]", "9-10"]) == 3


def test_the_stop_loop_terms_every_node_at_once_and_kills_one_that_ignores_it():
    said = []
    polite = subprocess.Popen(["sleep", "30"])
    stubborn = subprocess.Popen(["bash", "-c", "trap '' TERM; sleep 30 & wait; sleep 30"])
    time.sleep(0.3)  # the trap is set
    t0 = time.monotonic()
    nodes.stop_all([polite.pid, stubborn.pid], grace_s=1.0, what="redis-server", nodes="Redis", say=said.append)
    assert polite.wait(5) == -15 and stubborn.wait(5) == -9
    assert 1.0 <= time.monotonic() - t0 < 5
    assert said == [f"redis-server {stubborn.pid} ignored SIGTERM for 1 s: SIGKILL", "stopped 2 Redis node(s)"]


def test_a_pid_file_counts_only_while_its_process_is_that_node(tmp_path):
    cluster = RedisCluster(7040, directory=tmp_path)
    cluster.node_dir(7040).mkdir(parents=True)
    (cluster.node_dir(7040) / "redis.pid").write_text(f"{os.getpid()}\n")  # a pid reused by another program
    assert cluster.pid(7040) is None
    (cluster.node_dir(7040) / "redis.pid").write_text("not a pid\n")
    assert cluster.pid(7040) is None
    rabbit = RabbitCluster(5690, directory=tmp_path)
    (tmp_path / "5690").mkdir()
    (tmp_path / "5690" / "rabbitmq.pid").write_text(f"{os.getpid()}")
    assert rabbit.pid(5690) is None


def test_a_test_leg_picks_its_own_cluster_or_a_free_one():
    class Fake:
        def __init__(self, base, mine=(), taken=()):
            self.base, self.mine, self.taken = base, mine, taken

        def pid(self, port):
            return 1 if self.base in self.mine else None

        def ports_taken(self):
            return self.base in self.taken

    def pick(bases, **kw):
        return _pick_base(lambda b: Fake(b, **kw), [str(b) for b in bases])

    assert pick([7090, 7080], taken=(7090,)) == 7080
    assert pick([7090, 7080], mine=(7090,), taken=(7090,)) == 7090  # this checkout's, running
    assert pick([7090, 7080], taken=(7090, 7080)) == 7090  # none free: the first (it says the ports are taken)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.clusters", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("args", [(), ("start",), ("up", "now"), ("down", "--all"), ("redis", "pid"),
                                  ("rabbitmq", "healthy"), ("redis", "ctl", "7000", "x")])
def test_the_command_line_refuses_what_it_does_not_know(args):
    out = _cli(*args)
    assert out.returncode == 2 and out.stderr.startswith("usage: bash scripts/cluster up | down [--wipe] | status")


def test_the_shell_names_call_the_runner():
    """scripts/cluster.sh's functions, as scripts/test and the tests source them,
    on clusters that do not run here (base 7080 and 5696: nothing is started
    or written)."""
    script = ('source scripts/lib.sh; source scripts/cluster.sh; redis_cluster_use 7080; rabbitmq_cluster_use 5696; '
              'echo "${REDIS_CLUSTER_PORTS[*]}"; echo "${RABBITMQ_CLUSTER_PORTS[*]}"; rabbitmq_cluster_url; echo; '
              'if redis_node_pid 7080; then echo running; else echo "not running"; fi; '
              'rabbitmq_ctl 5696 no-such-tool || echo "ctl $?"')
    out = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    lines = out.stdout.splitlines()
    assert lines[0] == " ".join(str(7080 + i) for i in range(9))
    assert lines[1] == "5696 5697 5698"
    assert lines[2] == RabbitCluster(5696).url()
    assert lines[3] == "not running"
    assert lines[4] == "ctl 127", out.stderr
    assert not (ROOT / "var" / "cluster" / "redis-7080").exists()
    assert _cli("--help").stdout.startswith("usage: bash scripts/cluster")
    assert subprocess.run(["bash", "scripts/cluster", "bogus"], cwd=ROOT, capture_output=True).returncode == 2
