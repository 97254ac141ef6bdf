"""What the benchmark (benchmarks.bench), the fault matrix (benchmarks.chaos) and
the other measurements share, one module per concept:

  stores     a store set of their own (a MySQL database, a Redis db or a key
             prefix on a cluster, a queue), made fresh; buyers and SKUs
  processes  real web (granian, gunicorn or uWSGI), worker, beat and HAProxy processes
  cpu        the CPU each component used, counted by pid
  load       the purchase requests, and what their answers accepted

Import order matters: call `stores.configure(...)` before anything imports Django.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
HOST = "127.0.0.1"


def say(msg: str) -> None:
    """A line of the figures, on stdout."""
    print(msg, flush=True)


def progress(msg: str) -> None:
    """A progress line on stderr (the figures stay on stdout)."""
    print(f"  .. {msg}", file=sys.stderr, flush=True)
