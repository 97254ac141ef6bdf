"""The fault matrix's plan: the faults by kind, and which runs (a fault alone, or
faults in sequence) a plan holds. Names only: nothing here touches a server."""
from __future__ import annotations

import itertools

# Every fault, in the order the plan pairs them.
FAULT_NAMES = ("worker-kill", "rabbitmq-restart", "redis-restart", "redis-flushall", "redis-rollback",
               "mariadb-restart", "web-kill", "worker-down", "redis-master-kill", "redis-master-pause",
               "redis-failover", "rabbitmq-node-kill", "rabbitmq-node-restart", "web-host-kill", "worker-active-kill",
               "mariadb-restore", "redis-master-isolate", "redis-replica-lag", "rabbitmq-node-isolate",
               "worker-broker-cut", "web-redis-cut", "host-isolate", "mariadb-node-kill", "mariadb-node-pause",
               "mariadb-node-restart", "mariadb-crash-all")
# The one Redis's losses, which a cluster does not have (its nodes are lost one
# at a time: the cluster faults); and those, which one Redis does not have.
SINGLE_REDIS_FAULTS = ("redis-restart", "redis-flushall", "redis-rollback")
CLUSTER_FAULTS = ("redis-master-kill", "redis-master-pause", "redis-failover")
# The faults of several hosts (--cluster only, on its RabbitMQ cluster, two web
# instances and two workers); the one broker's restart is left out there (the
# cluster has no single broker: rabbitmq-node-restart takes its place).
HOST_FAULTS = ("rabbitmq-node-kill", "rabbitmq-node-restart", "web-host-kill", "worker-active-kill")
SINGLE_BROKER_FAULTS = ("rabbitmq-restart",)
# A lost data directory restored from the backups: on a MariaDB of the run's own
# (127.0.0.1:3396-3399), never the machine's, so it runs alone, with a stack of
# its own (benchmarks.chaos.faults.restore); not paired, not on --cluster.
RESTORE_FAULTS = ("mariadb-restore",)
# The Galera cluster's faults (--cluster only, on its own cluster of three nodes
# behind the HAProxy front every DATABASE_URL names): the node the front writes
# to killed, paused, restarted, and all three crashed together.
GALERA_FAULTS = ("mariadb-node-kill", "mariadb-node-pause", "mariadb-node-restart", "mariadb-crash-all")
# The network's faults (--hosts only: cuts between the test bed's hosts).
NETWORK_FAULTS = ("redis-master-isolate", "redis-replica-lag", "rabbitmq-node-isolate", "worker-broker-cut",
                  "web-redis-cut", "host-isolate")
# Those that lose the aimed master (its pause is measured as a Redis loss's).
NETWORK_LOSSES = ("redis-master-isolate", "redis-replica-lag", "host-isolate")
# The process faults the bed pairs them with (each network fault before it).
BED_PROCESS_FAULTS = ("redis-master-kill", "worker-active-kill", "web-host-kill", "rabbitmq-node-kill", "web-kill")
# --hosts --quick: each network fault alone and three pairs with a process fault.
HOSTS_QUICK_PAIRS = [("redis-master-isolate", "worker-active-kill"), ("worker-broker-cut", "redis-master-kill"),
                     ("rabbitmq-node-isolate", "web-host-kill")]

# Redis losses every plan holds (when their faults are chosen): alone, while the
# worker is down for the whole sale, and just before and after a worker kill.
LOSS_RUNS = [("redis-flushall",), ("redis-restart",), ("redis-rollback",), ("worker-down", "redis-restart"),
             ("redis-restart", "worker-kill"), ("worker-kill", "redis-flushall"), ("redis-rollback", "web-kill")]
# On a cluster: each node fault alone and followed by a worker kill, a web kill
# and a RabbitMQ node restart, one with the worker down for the whole sale, and
# a worker kill just before a kill (the RabbitMQ restarts last: the slowest to land).
CLUSTER_LOSS_RUNS = (
    [(f,) for f in CLUSTER_FAULTS]
    + [(f, p) for p in ("worker-kill", "web-kill") for f in CLUSTER_FAULTS]
    + [("worker-down", "redis-master-kill"), ("worker-kill", "redis-master-kill")]
    + [(f, "rabbitmq-node-restart") for f in CLUSTER_FAULTS]
)
# The faults of several hosts: each alone, each with a Redis master kill (after
# it; the node restart before it, since the restart takes the whole ~3.5 s load
# and a kill after it would meet a sale already over), and three pairs of them
# (the broker's faults last: the slower to land).
HOST_RUNS = (
    [(f,) for f in HOST_FAULTS]
    + [(f, "redis-master-kill") if f != "rabbitmq-node-restart" else ("redis-master-kill", f) for f in HOST_FAULTS]
    + [("worker-active-kill", "rabbitmq-node-kill"), ("web-host-kill", "rabbitmq-node-restart"),
       ("rabbitmq-node-kill", "worker-active-kill")]
)
# The database's faults: each alone, and each with a Redis master kill and a
# RabbitMQ node kill after it (the database fault first: it lands at once, its
# node comes back while the sale goes on); --quick keeps six of those pairs.
GALERA_RUNS = (
    [(f,) for f in GALERA_FAULTS]
    + [(f, p) for f in GALERA_FAULTS for p in ("redis-master-kill", "rabbitmq-node-kill")]
)
GALERA_QUICK_PAIRS = [("mariadb-node-kill", "redis-master-kill"), ("mariadb-node-kill", "rabbitmq-node-kill"),
                      ("mariadb-node-pause", "redis-master-kill"), ("mariadb-node-restart", "rabbitmq-node-kill"),
                      ("mariadb-crash-all", "redis-master-kill"), ("mariadb-crash-all", "rabbitmq-node-kill")]
# The other faults the cluster's quick plan runs alone (as a control: the same
# faults as on one Redis, now with the gate sharded). MariaDB's restart and
# RabbitMQ's alone stay in the full plan: neither meets a Redis node.
CLUSTER_QUICK_ALONE = ("worker-kill", "web-kill")


def fault_names(cluster: bool, hosts: bool = False) -> list[str]:
    """The faults of the matrix on this kind of Redis (and on the test bed of
    hosts: the network's too), in the order the plan pairs them."""
    skip = (SINGLE_REDIS_FAULTS + SINGLE_BROKER_FAULTS + RESTORE_FAULTS if cluster or hosts
            else CLUSTER_FAULTS + HOST_FAULTS)
    skip += () if hosts else NETWORK_FAULTS
    skip += GALERA_FAULTS if hosts or not cluster else ()  # the bed's database is one server (db1)
    return [name for name in FAULT_NAMES if name not in skip]


def hosts_plan(only: list[str] | None, quick: bool) -> list[tuple[str, ...]]:
    """--hosts: each network fault alone, then (quick) three pairs with a
    process fault, or (full) each network fault before each process fault of
    the bed's, and those that lose no master after a Redis master kill."""
    network = [n for n in (only or NETWORK_FAULTS) if n in NETWORK_FAULTS]
    singles = [(n,) for n in network]
    if quick:
        pairs = [p for p in HOSTS_QUICK_PAIRS if set(p) <= set(only or FAULT_NAMES)]
        return list(dict.fromkeys(singles + pairs))
    pairs = ([(n, f) for n in network for f in BED_PROCESS_FAULTS if f in (only or FAULT_NAMES)]
             + [("redis-master-kill", n) for n in network if n not in NETWORK_LOSSES])
    return list(dict.fromkeys(singles + pairs))


def plan(only: list[str] | None, quick: bool, cluster: bool = False) -> list[tuple[str, ...]]:
    """The runs, in order: every fault alone, then (full) every ordered pair or
    (quick) six of them, and the loss runs of their kind."""
    names = only or fault_names(cluster)
    singles = [(n,) for n in names]
    # worker-down first or not at all, and never with worker-active-kill (no worker is active then)
    pairs = [p for p in itertools.permutations([n for n in names if n not in RESTORE_FAULTS], 2)
             if "worker-down" not in p or (p[0] == "worker-down" and "worker-active-kill" not in p)]
    if cluster:
        losses = [run for run in CLUSTER_LOSS_RUNS + HOST_RUNS if set(run) <= set(names)]
        database = [run for run in GALERA_RUNS if set(run) <= set(names)
                    and (not quick or len(run) == 1 or run in GALERA_QUICK_PAIRS)]
        losses += database
        if quick:
            return list(dict.fromkeys([s for s in singles if s[0] in CLUSTER_QUICK_ALONE] + losses))
        return list(dict.fromkeys(singles + losses + pairs))
    if quick:
        pairs = pairs[:: max(1, len(pairs) // 6)][:6]
    losses = [run for run in LOSS_RUNS if set(run) <= set(names)]
    return list(dict.fromkeys(singles + pairs + losses))
