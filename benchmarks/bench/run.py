"""One benchmark run, its parts in order: the stores made fresh, the servers
started, the rounds, the whole sale, the drains, the order life settled and
every SKU checked in both stores, the masters' shares on a cluster, the verdict."""
from __future__ import annotations

import argparse

from benchmarks.bench import cluster, drain, rounds, whole
from benchmarks.bench.loads import tokens_by_user
from benchmarks.bench.options import CLUSTER_PREFIX, DB_NAME, QUEUE, REDIS_DB, Sizes
from benchmarks.bench.settle import check_sku, settle_life
from benchmarks.bench.stack import Bench, Stack
from benchmarks.bench.summary import verdict
from benchmarks.harness import say, stores


def set_up(args: argparse.Namespace, cluster_url: str | None) -> Bench:
    """Fresh stores, the buyers and the servers."""
    if cluster_url:
        from core.reporting import credentials_hidden

        say(f"setting up a fresh database {DB_NAME}, the keys {CLUSTER_PREFIX}:* of the Redis Cluster "
            f"{credentials_hidden(cluster_url)} and queue {QUEUE} ...")
    else:
        say(f"setting up a fresh database {DB_NAME}, Redis db {REDIS_DB} and queue {QUEUE} ...")
    stores.fresh_stores()
    masters = stores.redis_masters()
    if cluster_url:
        say(f"    {len(masters)} masters ({', '.join(masters)}); every sale's SKUs one per master, "
            "its requests to each in turn")
    evalsha0 = stores.evalsha_calls() if cluster_url else {}
    tokens = stores.make_buyers(args.buyers)
    return Bench(args=args, sizes=Sizes.of(args), cluster_url=cluster_url, stack=Stack.start(args), tokens=tokens,
                 token_of=tokens_by_user(tokens), masters=masters, evalsha0=evalsha0)


def consistency(bench: Bench) -> None:
    """[4]: the order life settled (what is unpaid expired), then every SKU the
    gate sold checked in both stores."""
    say("\n[4] consistency: the order life settled, every SKU in both stores")
    quiet = settle_life([s for s, _, _ in bench.sales])
    say(f"    every move, give and confirm reached both stores: {quiet}")
    bench.checks.extend(check_sku(sku_id, stock, accepted, gate=True) for sku_id, stock, accepted in bench.sales)


def run(args: argparse.Namespace, cluster_url: str | None) -> int:
    bench = set_up(args, cluster_url)
    try:
        done = rounds.run_rounds(bench)
        if "whole" not in bench.sizes.skip:
            whole.whole_sale(bench)
        if "backlog" not in bench.sizes.skip:
            drain.drains(bench)
        consistency(bench)
        if args.cluster and not args.cluster_url:
            from benchmarks.bench import dbcommit
            from benchmarks.bench.options import galera_base

            say(f"\n[6] the database per commit: the single server (3306) beside the Galera cluster "
                f"({galera_base()}-{galera_base() + 2}, its front {galera_base() + 3}), interleaved")
            bench.summary.update(dbcommit.compare(galera_base(), rounds=2 if args.quick else 4,
                                                  seconds=3.0 if args.quick else 5.0, say=say))
        if cluster_url:
            say("\n[5] the reserve calls each master served")
            bench.summary["hot_node_share"] = cluster.node_shares(
                bench.sales, bench.selling_skus, bench.masters, bench.evalsha0, done.rows["selling"])
    finally:
        bench.stack.stop()
    # what drove the phases ("asyncio x2" -> "asyncio-x2": one token per value)
    generators = "+".join(sorted({p.generator.replace(" ", "-") for ps in done.rows.values() for p in ps}))
    return 0 if verdict(bench, generators) else 1
