"""bash scripts/cluster up | down [--wipe] | status, and the single commands
scripts/cluster.sh gives the shell (python -m benchmarks.clusters redis|rabbitmq|mariadb ...)."""
from __future__ import annotations

import os
import sys

from benchmarks.clusters.mariadb_cluster import GaleraCluster
from benchmarks.clusters.nodes import ClusterError, in_parallel, log
from benchmarks.clusters.rabbitmq_cluster import RabbitCluster
from benchmarks.clusters.redis_cluster import RedisCluster
from benchmarks.clusters.status import mariadb_status, rabbitmq_status, redis_status

USAGE = """\
usage: bash scripts/cluster up | down [--wipe] | status
       bash scripts/cluster up --hosts | down --hosts [--wipe] | status --hosts
       (the multi-host test bed: python -m benchmarks.hosts --help)

Every command covers the three clusters: Redis on 127.0.0.1:7000-7008 (nine
nodes, var/cluster/redis/; SECKILL_REDIS_CLUSTER_BASE moves them), RabbitMQ on
127.0.0.1:5681-5683 (three nodes, var/cluster/rabbitmq/;
SECKILL_RABBITMQ_CLUSTER_BASE moves them) and MariaDB Galera on
127.0.0.1:3311-3313 with its HAProxy front on 3314 (three nodes,
var/cluster/mariadb/; SECKILL_MARIADB_CLUSTER_BASE moves them; node N's
group communication on N+1000, IST on N+1100, SST on N+1200).

  up            installs redis-server and rabbitmq-server where missing, starts
                the nodes that are not running, forms the clusters if they are not
                formed yet, and waits until they are whole:
                Redis: every node says cluster_state:ok and every replica is in
                sync. Gives up after 60 s of waiting.
                RabbitMQ: every node runs and is a member (a fresh or wiped node
                joins with rabbitmqctl join_cluster), the user
                $SECKILL_RABBITMQ_USER/$SECKILL_RABBITMQ_PASSWORD (seckill/seckill)
                has every permission on "/", and every quorum queue has a replica
                on every node (rabbitmq-queues grow). Gives up after 120 s.
                MariaDB: the first node bootstraps (--wsrep-new-cluster) and the
                others join one at a time; every node Synced in one primary
                component of three, then the front (HAProxy with
                deploy/galera-check) routes to one of them. After a crash of
                every node they form their last component again (pc.recovery),
                else the most advanced one (--wsrep-recover) bootstraps.
                Gives up after 240 s. DATABASE_URL for it: see mariadb url.
                Running it again is harmless; it also restarts a killed node (a
                Redis one comes back as a replica when its slots were failed over;
                a RabbitMQ one rejoins) and resumes a SIGSTOPped Redis node.
                Prints nothing on stdout; CELERY_BROKER_URL for the RabbitMQ
                cluster is its three node URLs joined by ';' (see status).
  down          stops the nodes this script started (by their pid files) and keeps
                their data: the next up brings back the same clusters (Redis from
                nodes.conf and the append-only files, RabbitMQ from mnesia/,
                MariaDB from its data directories).
  down --wipe   stops them and deletes var/cluster/redis/, var/cluster/rabbitmq/
                and var/cluster/mariadb/:
                the next up forms fresh, empty clusters.
  status        Redis: one line per node (pid, role, whose replica, a master's
                slots, its own cluster_state); ok when every slot is served by a
                live master that takes writes and every node that answers says
                cluster_state:ok (a stopped replica is shown but tolerated). A
                paused node costs it 2 s per question asked of it.
                RabbitMQ: one line per node (pid, name, membership); ok only when
                all three run and are clustered.
                MariaDB: one line per node (pid, running/paused/down, component,
                local state, cluster size, which one the front writes to); ok only
                when all three are synced and the front routes to one.
                Exits 0 when all are ok, 1 otherwise.

The single Redis on 6379, the RabbitMQ node on 5672 and the MariaDB on 3306 are
never touched.

One cluster at a time (what scripts/cluster.sh's shell functions call):
  python -m benchmarks.clusters redis [--base N] up | down [--wipe] | status | healthy | url
                                      | pid PORT | ports-taken | pick-base BASE...
  python -m benchmarks.clusters rabbitmq [--base N] up | down [--wipe] | status | url
                                         | pid PORT | ports-taken | pick-base BASE... | ctl PORT TOOL ARG...
  python -m benchmarks.clusters mariadb [--base N] up | down [--wipe] | status | url [DB] | writer
                                        | pid PORT | ports-taken | pick-base BASE...
                                        | node kill|stop|cont|term|start PORT
      url: DATABASE_URL through the front (database seckill unless DB); writer:
      the node the front sends to now; node kill = SIGKILL, stop = SIGSTOP,
      cont = SIGCONT, term = an orderly stop, start = start it and wait until
      it is synced again.
"""


class Usage(Exception):
    pass


def _base(args: list[str], variable: str, default: int) -> tuple[int, list[str]]:
    if args[:1] == ["--base"] and len(args) > 1 and args[1].isdigit():
        return int(args[1]), args[2:]
    return int(os.environ.get(variable) or default), args


def _all(args: list[str]) -> int:
    redis = RedisCluster(int(os.environ.get("SECKILL_REDIS_CLUSTER_BASE") or 7000))
    rabbit = RabbitCluster(int(os.environ.get("SECKILL_RABBITMQ_CLUSTER_BASE") or 5681))
    galera = GaleraCluster(int(os.environ.get("SECKILL_MARIADB_CLUSTER_BASE") or 3311))
    command, rest = args[0], args[1:]
    if command == "status" and not rest:
        ok = [redis_status(redis), rabbitmq_status(rabbit), mariadb_status(galera)]
        print("\n\n".join(text for _, text in ok))
        return 0 if all(good for good, _ in ok) else 1
    if command == "up" and not rest:
        failed = in_parallel(redis.up, rabbit.up, galera.up)  # the nodes of each boot while the others form
    elif command == "down" and rest in ([], ["--wipe"]):
        failed = in_parallel(lambda: redis.down(wipe=bool(rest)), lambda: rabbit.down(wipe=bool(rest)),
                             lambda: galera.down(wipe=bool(rest)))
    else:
        raise Usage
    for exc in failed:
        if exc is not None:
            if not isinstance(exc, ClusterError):
                raise exc
            log(str(exc))
    return 1 if any(failed) else 0


def _pick_base(cluster_of, bases: list[str]) -> int:
    """The first of `bases` whose cluster is this checkout's (its first node runs)
    or whose ports are all free; else the first."""
    for base in map(int, bases):
        cluster = cluster_of(base)
        if cluster.pid(base) is not None or not cluster.ports_taken():
            return base
    return int(bases[0])


def _one(cluster, kind: type, args: list[str]) -> int:
    command, rest = (args[0], args[1:]) if args else ("", [])
    if command in ("up", "status", "healthy", "ports-taken", "writer") and rest:
        raise Usage
    if command == "url" and (rest if kind is not GaleraCluster else len(rest) > 1):
        raise Usage
    if command == "up":
        cluster.up()
    elif command == "down" and rest in ([], ["--wipe"]):
        cluster.down(wipe=bool(rest))
    elif command == "status":
        ok, text = {RedisCluster: redis_status, RabbitCluster: rabbitmq_status,
                    GaleraCluster: mariadb_status}[kind](cluster)
        print(text)
        return 0 if ok else 1
    elif command == "url":
        sys.stdout.write(cluster.url(*rest))
    elif command == "writer" and kind is GaleraCluster:
        port = cluster.front_node()
        sys.stdout.write(str(port or ""))
        return 0 if port else 1
    elif command == "node" and kind is GaleraCluster and len(rest) == 2 and rest[1].isdigit():
        cluster.node(rest[0], int(rest[1]))
    elif command == "healthy" and kind is RedisCluster:
        return 0 if cluster.healthy() else 1
    elif command == "ports-taken":
        return 0 if cluster.ports_taken() else 1
    elif command == "pid" and len(rest) == 1 and rest[0].isdigit():
        pid = cluster.pid(int(rest[0]))
        sys.stdout.write(str(pid or ""))
        return 0 if pid else 1
    elif command == "pick-base" and rest and all(b.isdigit() for b in rest):
        sys.stdout.write(str(_pick_base(lambda base: kind(base, say=cluster.say), rest)))
    elif command == "ctl" and kind is RabbitCluster and len(rest) >= 2 and rest[0].isdigit():
        done = cluster.ctl(int(rest[0]), *rest[1:], check=False)
        sys.stdout.write(done.stdout)
        sys.stderr.write(done.stderr)
        return done.returncode
    else:
        raise Usage
    return 0


def main(argv: list[str]) -> int:
    if "--hosts" in argv:  # the multi-host test bed (benchmarks/hosts)
        from benchmarks.hosts.__main__ import main as hosts_main

        return hosts_main(argv)
    try:
        if argv[:1] == ["redis"]:
            base, rest = _base(argv[1:], "SECKILL_REDIS_CLUSTER_BASE", 7000)
            return _one(RedisCluster(base), RedisCluster, rest)
        if argv[:1] == ["rabbitmq"]:
            base, rest = _base(argv[1:], "SECKILL_RABBITMQ_CLUSTER_BASE", 5681)
            return _one(RabbitCluster(base), RabbitCluster, rest)
        if argv[:1] == ["mariadb"]:
            base, rest = _base(argv[1:], "SECKILL_MARIADB_CLUSTER_BASE", 3311)
            return _one(GaleraCluster(base), GaleraCluster, rest)
        if argv[:1] in (["-h"], ["--help"]):
            print(USAGE, end="")
            return 0
        if not argv:
            raise Usage
        return _all(argv)
    except Usage:
        sys.stderr.write(USAGE)
        return 2
    except ClusterError as exc:
        log(str(exc))
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
