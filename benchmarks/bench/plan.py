"""--plan: what a run with these options would do, printed; nothing is started,
no store touched."""
from __future__ import annotations

import argparse
import os

from benchmarks.bench.components import COMPONENT_KEYS
from benchmarks.bench.options import CLUSTER_PREFIX, DB_NAME, QUEUE, REDIS_DB, Sizes
from benchmarks.bench.rounds import PHASES
from benchmarks.bench.whole import DEMAND

# The summary's keys in the order of its last line (docs/benchmark.md says what each means).
SUMMARY_KEYS = ("soldout_ratio", "selling_ratio", "gate_vs_mysql", "mysql_per_click", "confirm_lag_s", "pay_ratio",
                "pay_p99_ratio", "floor_rps", "floor_ratio", "drain_rate", "oversold", "lost", "verdict", "server",
                "loadgen_cpu_share", "web_ms_soldout", "web_ms_selling", "web_ms_pay", "cpu_ms_selling",
                "cpu_ms_selling_net", "gunicorn_floor_ratio", "gunicorn_floor_rps", "generator", "shed",
                "partitions", "drain_rate_1", "drain_rate_n", "drain_rate_n1", "drain_rate_n2",
                *COMPONENT_KEYS)
CLUSTER_KEYS = ("redis_nodes", "hot_node_share")


def describe(args: argparse.Namespace) -> str:
    sizes = Sizes.of(args)
    on_cluster = bool(args.cluster or args.cluster_url)
    if args.cluster_url:
        redis = f"the Redis Cluster of --cluster-url, keys {CLUSTER_PREFIX}:*"
    elif args.cluster:
        base = os.environ.get("SECKILL_REDIS_CLUSTER_BASE") or "7000"
        redis = f"the local Redis Cluster on {base} (bash scripts/cluster), keys {CLUSTER_PREFIX}:*"
    else:
        redis = f"Redis db {REDIS_DB}"
    n = args.partitions
    lines = [
        "bash scripts/bench would run, with these options (--plan: nothing started):",
        f"  stores      database {DB_NAME}, {redis}, queue {QUEUE}",
        (f"  servers     the site under {args.server} ({args.web_workers} processes), the floor under {args.server}, "
         "the gunicorn floor (2 x 8), one worker, beat"),
        f"  [0]         the load generator per phase, by measurement: {', '.join(PHASES[:2] + PHASES[3:5])}",
        (f"  [1]         {sizes.rounds} interleaved rounds of {sizes.seconds:.0f} s phases at {sizes.concurrency} "
         f"connections: {', '.join(PHASES)}"),
    ]
    if "whole" not in sizes.skip:
        lines.append(f"  [2]         the whole sale: {sizes.whole_stock} units, demand "
                     f"{sizes.whole_stock * DEMAND}, through the gate and the MySQL-only path")
    if "backlog" not in sizes.skip:
        lines.append(f"  [3]         the backlog drain: {sizes.backlog_stock} units sold with the worker down, "
                     + (f"with 1 confirm partition, then {n}; then {n} with two workers against one, interleaved"
                        if n > 1 else "with 1 confirm partition"))
    lines.append("  [4]         the order life settled, every SKU checked in both stores")
    if on_cluster:
        lines.append("  [5]         the reserve calls each master served")
    if args.cluster and not args.cluster_url and args.database == "galera":
        base = int(os.environ.get("SECKILL_MARIADB_CLUSTER_BASE") or 3311)
        lines.insert(2, f"  database    the local Galera cluster {base}-{base + 2} through its front {base + 3}")
        lines.append("  [6]         the database per commit: the single server (3306) beside the Galera cluster, "
                     "interleaved (db_commit_*)")
    keys = SUMMARY_KEYS + (CLUSTER_KEYS if on_cluster else ()) + ("broker_nodes", "database", "pay_p99_ms")
    lines.append("  last line   " + " ".join(f"{k}=" for k in keys))
    return "\n".join(lines)
