"""The benchmark's command line, the sizes it gives each part, and its store set."""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from benchmarks.harness import processes, stores

# A run beside another checkout's may take stores of its own (a shared machine).
DB_NAME = os.environ.get("SECKILL_BENCH_DB", "seckill_bench")
REDIS_DB = int(os.environ.get("SECKILL_BENCH_REDIS_DB", "5"))
QUEUE = os.environ.get("SECKILL_BENCH_QUEUE", "seckill-bench")
# On a cluster (database 0 only, shared with the suite and the fault runs):
# every key of the benchmark's under this prefix, removed key by key
# (core.redis.shards.forget_everything), never a FLUSH.
CLUSTER_PREFIX = "seckill-bench"


def parser() -> argparse.ArgumentParser:
    from benchmarks import bench

    ap = argparse.ArgumentParser(prog="bash scripts/bench", description=bench.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="two short rounds, smaller sales")
    ap.add_argument("--plan", action="store_true", help="print what this run would do, start nothing")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--phase-seconds", type=float, default=None)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--web-workers", type=int, default=int(os.environ.get("WEB_CONCURRENCY", "2")))
    ap.add_argument("--server", choices=processes.WEB_SERVERS, default=processes.DEFAULT_SERVER,
                    help=f"the HTTP server of the web tier and the floor (default {processes.DEFAULT_SERVER}, "
                         "as deployed)")
    ap.add_argument("--web-queue", type=int, default=None,
                    help="requests that may wait for a slot per web process (SECKILL_WEB_QUEUE; default: the "
                         "deployment's, seckill_site/webserver.py)")
    ap.add_argument("--buyers", type=int, default=2000)
    ap.add_argument("--backlog", type=int, default=None, help="units sold while the worker is down")
    ap.add_argument("--skip", default="", help="comma-separated: whole, backlog")
    ap.add_argument("--partitions", type=int, default=3,
                    help="the backlog drain is measured with 1 and with this many confirm partitions "
                         "(SECKILL_CONFIRM_PARTITIONS of the web tier and the worker; default 3; 1: once)")
    ap.add_argument("--cluster", action="store_true",
                    help="on the local Redis Cluster (bash scripts/cluster; its base port "
                         "SECKILL_REDIS_CLUSTER_BASE, 7000 by default), the SKUs of every sale spread over its "
                         f"masters, the keys under the prefix {CLUSTER_PREFIX}")
    ap.add_argument("--database", choices=("galera", "single"), default="galera",
                    help="with --cluster: the database on the local Galera cluster's front (the default; "
                         "SECKILL_MARIADB_CLUSTER_BASE, else 3311) or on the single server (3306), to compare")
    ap.add_argument("--cluster-url", default=None, metavar="redis+cluster://HOST:PORT[,...]",
                    help="on this Redis Cluster instead (implies --cluster)")
    return ap


@dataclass(frozen=True)
class Sizes:
    """What each part of a run gets, from the options."""

    rounds: int
    seconds: float          # each phase of a round
    concurrency: int
    whole_stock: int        # the whole sale's stock (its demand 20x)
    backlog_stock: int      # units sold while the worker is down
    skip: frozenset[str]    # parts left out: whole, backlog

    @classmethod
    def of(cls, args: argparse.Namespace) -> Sizes:
        return cls(rounds=args.rounds or (2 if args.quick else 4),
                   seconds=args.phase_seconds or (3.0 if args.quick else 6.0), concurrency=args.concurrency,
                   whole_stock=200 if args.quick else 500,
                   backlog_stock=args.backlog or (3000 if args.quick else 20000),
                   skip=frozenset(filter(None, args.skip.split(","))))


def cluster_choice(args: argparse.Namespace) -> str | None:
    """The cluster's REDIS_URL when --cluster or --cluster-url is given."""
    if args.cluster_url:
        if not args.cluster_url.startswith("redis+cluster://"):
            raise SystemExit(f"--cluster-url: expected redis+cluster://host:port[,host:port...], "
                             f"got {args.cluster_url!r}")
        return args.cluster_url
    return stores.cluster_url() if args.cluster else None


def galera_base() -> int:
    """The local Galera cluster --cluster runs the database on: SECKILL_MARIADB_CLUSTER_BASE, else 3311."""
    return int(os.environ.get("SECKILL_MARIADB_CLUSTER_BASE") or 3311)


def configure(cluster_url: str | None, galera: bool = False) -> None:
    """The benchmark's store set, before Django starts (its settings are made
    from the environment). Throttling off: the load generator's buyers click far
    faster than 10/s each, and pay or cancel their many orders faster than 20/s each.
    `galera` (--cluster): the database through the local Galera cluster's front."""
    stores.configure(db_name=DB_NAME, redis_db=REDIS_DB, queue=QUEUE, web_db_user=f"{DB_NAME}_web",
                     extra_env={"SECKILL_THROTTLE_RATE": "0", "SECKILL_ORDER_CALLS_RATE": "0"},
                     redis_url=cluster_url, redis_prefix=CLUSTER_PREFIX if cluster_url else None,
                     db_port=galera_base() + 3 if galera else 3306)
