"""The servers of one benchmark run, and what its parts share."""
from __future__ import annotations

import argparse
import os
import random
from dataclasses import dataclass, field

from benchmarks.bench.options import Sizes
from benchmarks.harness import processes
from benchmarks.harness.processes import Server

FLOOR_APP = "benchmarks.floor:application"


@dataclass
class Stack:
    """The site, its floor under the same server, the gunicorn floor, a worker
    and beat, each on a port of its own."""

    port: int
    floor_port: int
    gfloor_port: int
    queue: int        # SECKILL_WEB_QUEUE of the site: requests that may wait per process
    web: Server
    floor: Server
    gfloor: Server
    worker: Server
    beat: Server

    @classmethod
    def start(cls, args: argparse.Namespace) -> Stack:
        """The web tier runs the deployment's bounded backlog
        (seckill_site/webserver.py: SECKILL_WEB_THREADS requests run per process,
        SECKILL_WEB_QUEUE more wait) unless --web-queue says otherwise; every 503
        it sheds is counted (shed=)."""
        from seckill_site import webserver

        port, floor_port = 18000 + random.randint(0, 499), 18500 + random.randint(0, 499)
        gfloor_port = 19000 + random.randint(0, 499)
        worker = processes.start_worker()
        beat = processes.start_beat()
        queue = args.web_queue if args.web_queue is not None else webserver.QUEUE
        web = processes.start_web(port, args.web_workers, server=args.server,
                                  extra={"SECKILL_WEB_QUEUE": str(queue)})
        # The floor runs under the same server as the site: floor_ratio compares like with like.
        floor = processes.web_server(args.server, FLOOR_APP, floor_port, args.web_workers, dict(os.environ),
                                     "bench-floor.log")
        # A fixed yardstick whatever the server: the bare view under gunicorn,
        # 2 workers x 8 threads (gunicorn_floor_ratio).
        gfloor = processes.web_server("gunicorn", FLOOR_APP, gfloor_port, 2, dict(os.environ), "bench-gfloor.log",
                                      threads=8)
        return cls(port, floor_port, gfloor_port, queue, web, floor, gfloor, worker, beat)

    def stop(self) -> None:
        for server in (self.web, self.floor, self.gfloor, self.worker, self.beat):
            server.stop()


@dataclass
class Bench:
    """What the parts of a run share: the options, the servers, the buyers, and
    what every part adds to the verdict."""

    args: argparse.Namespace
    sizes: Sizes
    cluster_url: str | None
    stack: Stack
    tokens: list[str]
    token_of: dict[int, str]      # user id -> token
    masters: list[str]            # the nodes serving the gate at the start
    evalsha0: dict[str, int]      # each master's EVALSHA calls at the start (on a cluster)
    summary: dict[str, float] = field(default_factory=dict)
    checks: list[dict] = field(default_factory=list)  # SKUs sold outside the gate, checked as they are
    # every SKU the gate sold: its stock and the order ids of its 202s, checked at the end
    sales: list[tuple[str, int, set[str]]] = field(default_factory=list)
    selling_skus: set[str] = field(default_factory=set)  # those of the selling phases
