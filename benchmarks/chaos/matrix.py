"""The matrix run by run: the store set and the stack set up once, each run in
turn (a run that could not complete is a failed run, and whatever it left down
is brought back before the next), the table, and the summary last."""
from __future__ import annotations

import argparse
import random

from benchmarks import faults as servers
from benchmarks.chaos.nodes import RabbitNodes, RedisNodes
from benchmarks.chaos.report import CLUSTER_COLUMNS, COLUMNS, Row, cell, gaps_by_fault, pauses_by_fault, summary, width
from benchmarks.chaos.run import run_once
from benchmarks.chaos.stack import CLUSTER_PREFIX, DB_NAME, QUEUE, REDIS_DB, configure, start_stack
from benchmarks.harness import progress, say, stores

NAME_WIDTH = 36


class Matrix:
    def __init__(self, args: argparse.Namespace, runs: list[tuple[str, ...]], bases: tuple[int, int] | None):
        self.args, self.runs = args, runs
        self.hosts = bool(getattr(args, "hosts", False))
        if self.hosts:  # the test bed of hosts (benchmarks/hosts), brought up when it is not
            from benchmarks.chaos.bed import BedRabbit, BedRedis
            from benchmarks.hosts import bed

            bed.up()
            self.cluster, self.rabbit = BedRedis(), BedRabbit()
        else:
            self.cluster = RedisNodes(bases[0]) if bases else None
            self.rabbit = RabbitNodes(bases[1]) if bases else None
        self.partitions = max(1, args.partitions)
        # on the bed a sale of 100 a SKU sold out before a cut's pause could be measured
        self.stock = args.stock or (250 if self.hosts else 100 if self.cluster else 300)
        self.columns = CLUSTER_COLUMNS if self.cluster else COLUMNS
        self.rows: list[Row] = []
        configure(self.cluster, self.rabbit, self.partitions, db_host=self._db_host())

    def _db_host(self) -> str | None:
        if not self.hosts:
            return None
        from benchmarks.hosts import bed

        return bed.DB_HOSTS[0].ip

    def ensure_up(self) -> None:
        """The machine's servers, and the clusters' nodes, whatever a fault left
        down (a killed node started again, a paused one resumed)."""
        servers.ensure_up()
        if self.hosts:
            from benchmarks.hosts import cuts

            cuts.heal_all()
        if self.cluster:
            self.cluster.up()
            self.rabbit.up()

    def set_up(self) -> None:
        cluster, rabbit = self.cluster, self.rabbit
        where = (f"Redis Cluster 127.0.0.1:{cluster.ports[0]}-{cluster.ports[-1]}, prefix {CLUSTER_PREFIX}"
                 if cluster else f"Redis db {REDIS_DB}")
        broker = (f"RabbitMQ cluster 127.0.0.1:{rabbit.ports[0]}-{rabbit.ports[-1]}" if rabbit
                  else f"RabbitMQ {servers.RABBITMQ_PORT}")
        if self.hosts:
            where = f"the test bed's Redis Cluster on store1-3, prefix {CLUSTER_PREFIX}, MariaDB on db1"
            broker = "the test bed's RabbitMQ on mq1-3"
        say(f"setting up a fresh database {DB_NAME}, {where}, {broker} and queue {QUEUE} ({self.partitions} confirm "
            f"partition{'s' if self.partitions > 1 else ''}) ...")
        self.ensure_up()
        stores.fresh_stores()
        self.tokens = stores.make_buyers(self.args.buyers)
        if self.hosts:
            from benchmarks.chaos.bed import start_bed_stack

            self.stack = start_bed_stack(19000 + random.randint(0, 999), rabbit)
        else:
            self.stack = start_stack(19000 + random.randint(0, 999), self.args.server, rabbit)
        args = self.args
        skus = "four SKUs (two on the master aimed at), " if cluster else ""
        tier = "two web instances behind HAProxy, two workers" if cluster else "one web tier, one worker"
        if self.hosts:
            tier = "web1 and web2 behind HAProxy, worker1 and worker2 (network namespaces on skbr0)"
        say(f"{len(self.runs)} runs: {skus}stock {self.stock}{' each' if cluster else ''}, {args.demand} clicks "
            f"each (+10 % retried), {args.concurrency} connections, web server {args.server}, {tier}\n")
        say(f"{'run':<{NAME_WIDTH}} " + " ".join(f"{c:>{width(c)}}" for c in self.columns) + "  verdict")

    def one(self, i: int, names: tuple[str, ...]) -> Row:
        progress(f"run {i}/{len(self.runs)}: {' + '.join(names)}")
        try:
            return run_once(self.stack, self.tokens, names, stock=self.stock, demand=self.args.demand,
                            concurrency=self.args.concurrency, cluster=self.cluster, run_index=i - 1)
        except Exception as exc:  # a run that could not complete is a failed run
            self.ensure_up()
            for server in self.stack.servers:
                if not server.alive:
                    server.start()
            self.stack.wait_webs()
            self.stack.wait_workers()
            return Row(" + ".join(names), ok=False, note=repr(exc)[:200], faults=names)

    def run(self) -> int:
        self.set_up()
        try:
            for i, names in enumerate(self.runs, 1):
                row = self.one(i, names)
                self.rows.append(row)
                say(f"{row.name:<{NAME_WIDTH}} " + " ".join(cell(row, c) for c in self.columns)
                    + f"  {'ok' if row.ok else 'FAIL'} {row.note}")
        finally:
            for server in self.stack.servers:
                server.stop()
            self.ensure_up()
        if self.cluster:
            say("")
            for line in pauses_by_fault(self.rows) + gaps_by_fault(self.rows):
                say(line)
        broker = f"cluster:{self.rabbit.ports[0]}" if self.rabbit else f"single:{servers.RABBITMQ_PORT}"
        if self.hosts:
            broker = "bed:mq1-3"
        base = ("bed" if self.hosts else self.cluster.ports[0]) if self.cluster else None
        say("\n" + summary(self.rows, redis_base=base, broker=broker,
                           partitions=self.partitions))
        return 0 if all(r.ok for r in self.rows) else 1
