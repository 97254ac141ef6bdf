"""The matrix run by run: the store set and the stack set up once, each run in
turn (a run that could not complete is a failed run, and whatever it left down
is brought back before the next), the table, and the summary last."""
from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import faults as servers
from benchmarks.chaos.nodes import GaleraNodes, RabbitNodes, RedisNodes
from benchmarks.chaos.plan import RESTORE_FAULTS
from benchmarks.chaos.report import (
    CLUSTER_COLUMNS,
    COLUMNS,
    Row,
    cell,
    database_by_fault,
    gaps_by_fault,
    pauses_by_fault,
    summary,
    width,
)
from benchmarks.chaos.run import run_once
from benchmarks.chaos.stack import (
    CLUSTER_PREFIX,
    DB_NAME,
    MARIADB_BASE,
    QUEUE,
    REDIS_DB,
    RESTORE_PORTS,
    RESTORE_QUEUE,
    RESTORE_REDIS_DB,
    configure,
    start_stack,
)
from benchmarks.harness import progress, say, stores

NAME_WIDTH = 36
ROW_JSON = "ROW-JSON "  # a child matrix's row, for its parent (mariadb-restore runs in one of its own)


def own_mariadb():
    """mariadb-restore's MariaDB: a fresh server on the first free port of
    3396-3399, its data, binary log and files in a directory of its own."""
    from backups.server import LocalServer, free_port_in

    base = Path(tempfile.mkdtemp(prefix="seckill-chaos-restore-"))
    base.chmod(0o755)  # the server runs as mysql
    db = LocalServer(datadir=base / "data-0", port=free_port_in(RESTORE_PORTS), binlog_dir=base / "binlog-0",
                     run_dir=base / "run")
    db.initialize()
    db.start()
    return db


class Matrix:
    def __init__(self, args: argparse.Namespace, runs: list[tuple[str, ...]], bases: tuple[int, int] | None):
        restores = [r for r in runs if set(r) & set(RESTORE_FAULTS)]
        # The restore runs on a MariaDB of its own, with a stack of its own: alone, in
        # this process; among other runs, in a child matrix after them.
        self.own_db = bool(runs) and len(restores) == len(runs)
        self.aside = [] if self.own_db else restores
        self.args, self.runs = args, [r for r in runs if r not in self.aside]
        self.hosts = bool(getattr(args, "hosts", False))
        if self.hosts:  # the test bed of hosts (benchmarks/hosts), brought up when it is not
            from benchmarks.chaos.bed import BedRabbit, BedRedis
            from benchmarks.hosts import bed

            bed.up()
            self.cluster, self.rabbit = BedRedis(), BedRabbit()
        else:
            self.cluster = RedisNodes(bases[0]) if bases else None
            self.rabbit = RabbitNodes(bases[1]) if bases else None
        # --cluster: the database too, a Galera cluster of its own (started when it
        # is not running); every process's DATABASE_URL names its front
        mariadb_base = getattr(args, "mariadb_base", None) or MARIADB_BASE
        self.galera = GaleraNodes(mariadb_base) if bases and not self.hosts else None
        self.partitions = max(1, args.partitions)
        # a longer sale for the restore: its two backups land while it runs; on the
        # bed a sale of 100 a SKU sold out before a cut's pause could be measured
        self.stock = args.stock or (250 if self.hosts else 100 if self.cluster else 4000 if self.own_db else 300)
        self.demand = max(args.demand, 10000) if self.own_db else args.demand
        self.columns = CLUSTER_COLUMNS if self.cluster else COLUMNS
        self.rows: list[Row] = []
        self.db = own_mariadb() if self.own_db else None
        configure(self.cluster, self.rabbit, self.partitions, db_port=self.db.port if self.db else None,
                  db_host=self._db_host(), db_front=self.galera.front if self.galera else None)

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
        if self.galera:
            self.galera.up()
        if self.cluster:
            self.cluster.up()
            self.rabbit.up()

    def _fresh_stores(self, tries: int = 3) -> None:
        """stores.fresh_stores, again when the Galera front shut its session
        (a busy machine's health check timed out and marked the writer down a moment)."""
        from django.db import OperationalError, connections

        for attempt in range(tries):
            try:
                stores.fresh_stores()
                return
            except OperationalError:
                if self.galera is None or attempt == tries - 1:
                    raise
                connections.close_all()
                self.galera.up()

    def set_up(self) -> None:
        cluster, rabbit = self.cluster, self.rabbit
        where = (f"Redis Cluster 127.0.0.1:{cluster.ports[0]}-{cluster.ports[-1]}, prefix {CLUSTER_PREFIX}"
                 if cluster else f"Redis db {RESTORE_REDIS_DB if self.db else REDIS_DB}")
        if self.db:
            where += f", its own MariaDB 127.0.0.1:{self.db.port} ({self.db.datadir.parent})"
        broker = (f"RabbitMQ cluster 127.0.0.1:{rabbit.ports[0]}-{rabbit.ports[-1]}" if rabbit
                  else f"RabbitMQ {servers.RABBITMQ_PORT}")
        if self.galera:
            where += (f", MariaDB Galera 127.0.0.1:{self.galera.ports[0]}-{self.galera.ports[-1]} behind its front "
                      f"{self.galera.front}")
        if self.hosts:
            where = f"the test bed's Redis Cluster on store1-3, prefix {CLUSTER_PREFIX}, MariaDB on db1"
            broker = "the test bed's RabbitMQ on mq1-3"
        say(f"setting up a fresh database {DB_NAME}, {where}, {broker} and queue {RESTORE_QUEUE if self.db else QUEUE} "
            f"({self.partitions} confirm "
            f"partition{'s' if self.partitions > 1 else ''}) ...")
        self.ensure_up()
        self._fresh_stores()
        self.tokens = stores.make_buyers(self.args.buyers)
        from benchmarks.bench.loads import tokens_by_user

        self.token_of = tokens_by_user(self.tokens)
        from backups.server import free_port_in

        port = free_port_in(range(19000, 20000))
        if self.hosts:
            from benchmarks.chaos.bed import start_bed_stack

            self.stack = start_bed_stack(port, rabbit)
        else:
            self.stack = start_stack(port, self.args.server, rabbit)
        self.stack.db = self.db
        self.stack.galera = self.galera
        args = self.args
        skus = "four SKUs (two on the master aimed at), " if cluster else ""
        tier = "two web instances behind HAProxy, two workers" if cluster else "one web tier, one worker"
        if self.hosts:
            tier = "web1 and web2 behind HAProxy, worker1 and worker2 (network namespaces on skbr0)"
        say(f"{len(self.runs)} runs: {skus}stock {self.stock}{' each' if cluster else ''}, {self.demand} clicks "
            f"each (+10 % retried), {args.concurrency} connections, web server {args.server}, {tier}\n")
        say(f"{'run':<{NAME_WIDTH}} " + " ".join(f"{c:>{width(c)}}" for c in self.columns) + "  verdict")

    def one(self, i: int, names: tuple[str, ...]) -> Row:
        progress(f"run {i}/{len(self.runs)}: {' + '.join(names)}")
        try:
            return run_once(self.stack, self.tokens, names, stock=self.stock, demand=self.demand,
                            concurrency=self.args.concurrency, cluster=self.cluster, run_index=i - 1,
                            token_of=self.token_of)
        except Exception as exc:  # a run that could not complete is a failed run
            self.ensure_up()
            for server in self.stack.servers:
                if not server.alive:
                    server.start()
            self.stack.wait_webs()
            self.stack.wait_workers()
            return Row(" + ".join(names), ok=False, note=repr(exc)[:200], faults=names)

    def show(self, row: Row) -> None:
        self.rows.append(row)
        say(f"{row.name:<{NAME_WIDTH}} " + " ".join(cell(row, c) for c in self.columns)
            + f"  {'ok' if row.ok else 'FAIL'} {row.note}")
        if self.args.row_json:
            say(ROW_JSON + json.dumps(dataclasses.asdict(row)))

    def run_aside(self, names: tuple[str, ...]) -> Row:
        """A run on a MariaDB of its own, in a child matrix (its Django names another database)."""
        args = self.args
        argv = [sys.executable, "-m", "benchmarks.chaos", "--only", ",".join(names), "--row-json",
                "--server", args.server, "--concurrency", str(args.concurrency), "--buyers", str(args.buyers),
                "--partitions", str(self.partitions)]
        done = subprocess.run(argv, stdout=subprocess.PIPE, text=True)
        for line in done.stdout.splitlines():
            if line.startswith(ROW_JSON):
                fields = json.loads(line[len(ROW_JSON):])
                return Row(**dict(fields, faults=tuple(fields["faults"])))
        return Row(" + ".join(names), ok=False, note=f"its matrix exited {done.returncode} with no row",
                   faults=names)

    def run(self) -> int:
        if self.runs:
            self.set_up()
        try:
            for i, names in enumerate(self.runs, 1):
                self.show(self.one(i, names))
        finally:
            if self.runs:
                for server in self.stack.servers:
                    server.stop()
                if self.stack.db is not None:
                    self.stack.db.stop()
                    shutil.rmtree(self.stack.db.run_dir.parent, ignore_errors=True)
                self.ensure_up()
        for names in self.aside:
            progress(f"run {names[0]}: in a matrix of its own (its own MariaDB)")
            self.show(self.run_aside(names))
        if self.cluster:
            say("")
            for line in pauses_by_fault(self.rows) + gaps_by_fault(self.rows) + database_by_fault(self.rows):
                say(line)
        broker = f"cluster:{self.rabbit.ports[0]}" if self.rabbit else f"single:{servers.RABBITMQ_PORT}"
        database = f"galera:{self.galera.base}" if self.galera else "single"
        if self.hosts:
            broker = "bed:mq1-3"
        base = ("bed" if self.hosts else self.cluster.ports[0]) if self.cluster else None
        say("\n" + summary(self.rows, redis_base=base, broker=broker,
                           partitions=self.partitions, database=database))
        return 0 if all(r.ok for r in self.rows) else 1
