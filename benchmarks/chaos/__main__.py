"""bash scripts/chaos (python -m benchmarks.chaos): the options, the plan, every
run in turn, the table and the summary."""
from __future__ import annotations

import argparse
import os
import sys

from benchmarks.chaos import plan as plans
from benchmarks.chaos.stack import CLUSTER_PREFIX, DB_NAME, MARIADB_BASE, QUEUE, RABBITMQ_BASE, REDIS_DB


def parser() -> argparse.ArgumentParser:
    from benchmarks import chaos

    ap = argparse.ArgumentParser(prog="bash scripts/chaos", description=chaos.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="every fault alone, six pairs and the Redis-loss runs "
                    "(with --cluster: each node fault alone and paired, worker-kill and web-kill alone)")
    ap.add_argument("--only", help="comma-separated faults (with their pairs)")
    ap.add_argument("--list", action="store_true", help="list the faults and exit")
    ap.add_argument("--plan", action="store_true", help="print the runs of this plan and exit, starting nothing")
    ap.add_argument("--cluster", action="store_true",
                    help="on the local Redis Cluster (bash scripts/cluster), with its node faults")
    ap.add_argument("--hosts", action="store_true",
                    help="with --cluster: on the multi-host test bed (bash scripts/cluster up --hosts; brought up "
                         "when it is not), with the network faults (cuts between hosts)")
    ap.add_argument("--cluster-base", type=int, default=None,
                    help="the cluster's first port (default SECKILL_REDIS_CLUSTER_BASE, else 7000)")
    ap.add_argument("--rabbitmq-base", type=int, default=None,
                    help="with --cluster: the RabbitMQ cluster's first port (default SECKILL_RABBITMQ_CLUSTER_BASE, "
                         f"else {RABBITMQ_BASE}; started when not running)")
    ap.add_argument("--mariadb-base", type=int, default=None,
                    help=f"with --cluster: the Galera cluster's first port (default {MARIADB_BASE}: its nodes there "
                         "and the next two, its front on base+3; started when not running)")
    ap.add_argument("--partitions", type=int, default=1,
                    help="SECKILL_CONFIRM_PARTITIONS of every process (default 1)")
    ap.add_argument("--stock", type=int, default=None, help="units per SKU (300; 100 on a cluster, of four SKUs)")
    ap.add_argument("--demand", type=int, default=1200, help="clicks per run (plus one in ten retried)")
    ap.add_argument("--buyers", type=int, default=600)
    ap.add_argument("--concurrency", type=int, default=48)
    ap.add_argument("--row-json", action="store_true", help=argparse.SUPPRESS)  # each row as JSON too (for a parent)
    ap.add_argument("--server", choices=("granian", "gunicorn"), default="granian",
                    help="the web tier's server (default granian, as deployed)")
    return ap


def bases(args: argparse.Namespace) -> tuple[int, int]:
    """The Redis Cluster's and the RabbitMQ cluster's first ports."""
    return (args.cluster_base or int(os.environ.get("SECKILL_REDIS_CLUSTER_BASE") or 7000),
            args.rabbitmq_base or int(os.environ.get("SECKILL_RABBITMQ_CLUSTER_BASE") or RABBITMQ_BASE))


def listing(names: list[str]) -> str:
    from benchmarks.chaos.faults import FAULTS

    return "\n".join(f"{name}: {(FAULTS[name].__doc__ or '').strip().splitlines()[0] if FAULTS[name].__doc__ else ''}"
                     for name in names)


def describe(args: argparse.Namespace, runs: list[tuple[str, ...]]) -> str:
    """--plan: where the runs would go, and each run, in order."""
    stock = args.stock or (100 if args.cluster else 300)
    if args.hosts:
        where = ("the test bed of hosts (store1-3: Redis Cluster, mq1-3: RabbitMQ, db1: MariaDB; web1-2 behind "
                 "HAProxy, worker1-2)")
    elif args.cluster:
        redis_base, rabbit_base = bases(args)
        db_base = args.mariadb_base or MARIADB_BASE
        where = (f"the Redis Cluster on {redis_base} (prefix {CLUSTER_PREFIX}), the RabbitMQ cluster on "
                 f"{rabbit_base}, the MariaDB Galera cluster on {db_base} (front {db_base + 3}), two web instances "
                 "behind HAProxy, two workers")
    else:
        where = f"Redis db {REDIS_DB}, the machine's RabbitMQ, one web tier, one worker"
    head = (f"bash scripts/chaos would run {len(runs)} runs (--plan: nothing started): database {DB_NAME}, {where}, "
            f"queue {QUEUE}; {'four SKUs of ' if args.cluster else ''}{stock} units, {args.demand} clicks a run, "
            f"{args.concurrency} connections, web server {args.server}, {max(1, args.partitions)} confirm "
            "partition(s)")
    return "\n".join([head, *(f"{i:>4}  {' + '.join(run)}" for i, run in enumerate(runs, 1))])


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.cluster = args.cluster or args.hosts
    names = plans.fault_names(args.cluster, args.hosts)
    if args.list:
        print(listing(names))
        return 0
    only = args.only.split(",") if args.only else None
    unknown = set(only or ()) - set(names)
    if unknown:
        raise SystemExit(f"unknown fault(s){' on a cluster' if args.cluster else ''}: "
                         f"{', '.join(sorted(unknown))}; see --list")
    runs = plans.hosts_plan(only, args.quick) if args.hosts else plans.plan(only, args.quick, args.cluster)
    if args.plan:
        print(describe(args, runs))
        return 0
    from benchmarks.chaos.matrix import Matrix

    return Matrix(args, runs, bases(args) if args.cluster else None).run()


if __name__ == "__main__":
    sys.exit(main())
