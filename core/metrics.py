"""The purchase path's Prometheus metrics: the one module that defines them.

Under gunicorn the web processes are forked workers, each with its own memory,
so the metrics run in prometheus-client's multiprocess mode: every process
writes its values to files in PROMETHEUS_MULTIPROC_DIR and a scrape (whichever
worker answers it) sums the files of all of them. gunicorn.conf.py sets that
directory before any worker imports this module (the mode is chosen when
prometheus_client is first imported), empties it when the server starts, and
tells the library when a worker exits. Without the variable (manage.py, the
tests' in-process client) the metrics live in this process's own registry.

Recording is on the hottest path there is, so the labelled children are bound
once here: a purchase costs two or three value increments, not a label lookup.
"""
from __future__ import annotations

import os
import time

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, multiprocess

MULTIPROCESS = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))

# In multiprocess mode the values are in files and a fresh registry with a
# MultiProcessCollector reads them at scrape time: the metrics register nowhere
# (registering them too would export them twice).
_registry: CollectorRegistry | None = None if MULTIPROCESS else CollectorRegistry()

# The outcomes a purchase can have, by the contract's error code ("accepted" and
# "replayed" are the 202s: a new reservation, and a retry of one already made).
OUTCOMES = ("accepted", "replayed", "sold_out", "limit_reached", "throttled", "unavailable")
OTHER = "error"  # every other code: invalid input, auth, not found, not on sale, internal

PURCHASES = Counter("seckill_purchase", "Purchase requests (POST orders) by outcome.",
                    ["outcome"], registry=_registry)
# A sold-out click takes ~1 ms, an accepted one waits for the broker's confirm
# (a few ms, more under load); 2.5 s is past any client's patience.
PURCHASE_SECONDS = Histogram(
    "seckill_purchase_seconds", "Time to answer a purchase request, in the web process.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
    registry=_registry)

_by_outcome = {outcome: PURCHASES.labels(outcome) for outcome in (*OUTCOMES, OTHER)}
_other = _by_outcome[OTHER]
_observe = PURCHASE_SECONDS.observe
_clock = time.perf_counter


def purchase_observed(*, outcome: str, started: float) -> None:
    """Count one purchase answer by its outcome (a code of the contract, or
    "accepted"/"replayed") and its time since `started` (time.perf_counter())."""
    _observe(_clock() - started)
    _by_outcome.get(outcome, _other).inc()


def exposition() -> bytes:
    """These metrics in the Prometheus text format, summed over every process
    of the server in multiprocess mode."""
    if MULTIPROCESS:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)
    return generate_latest(_registry)


# Captures the payment webhook recorded as refunds to make, by reason (the
# reasons of orders.models.PaymentRefund.Reason, given by the caller: core sits
# below orders). Incremented once per provider payment id, in the web process
# that recorded it; the refunds still open are a gauge read from MySQL at
# scrape time (reconciliation's metrics), exact whatever process wrote them.
PAYMENT_REFUNDS = Counter("seckill_payment_refunds", "Provider captures recorded as refunds to make, by reason.",
                          ["reason"], registry=_registry)


def payment_refund_counted(*, reason: str) -> None:
    PAYMENT_REFUNDS.labels(reason).inc()
