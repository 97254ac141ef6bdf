"""One run of the matrix: a fresh sale, its faults landed mid-sale, the pause
after a Redis loss measured, the run judged, and the system healed before the
next."""
from __future__ import annotations

import time

from benchmarks.chaos.context import Context
from benchmarks.chaos.faults.hosts import look_up_targets
from benchmarks.chaos.heal import heal_after
from benchmarks.chaos.judge import judge, verdict
from benchmarks.chaos.nodes import RedisNodes
from benchmarks.chaos.pause import measure_pause, second_wave
from benchmarks.chaos.payer import Payer
from benchmarks.chaos.plan import GALERA_FAULTS, HOST_FAULTS, NETWORK_FAULTS
from benchmarks.chaos.report import Row
from benchmarks.chaos.sale import Sale, land, sale_of, sale_skus
from benchmarks.chaos.stack import Stack


def _context(stack: Stack, cluster: RedisNodes | None, stock: int, run_index: int) -> Context:
    from core.adapters.redis_py import key_slot
    from inventory.redis.keys import sku_keys

    skus, aimed = sale_skus(cluster, stock, run_index)
    return Context(stack, skus, aimed=aimed, cluster=cluster, slot=key_slot(sku_keys(skus[0]).stock.encode()),
                   run_index=run_index)


def _after_the_load(row: Row, sale: Sale, tokens: list[str], names: tuple[str, ...]) -> None:
    """After a Redis loss its pause (with a second wave where the load left no
    sale after it); with no loss, the 503s after the first host fault."""
    ctx, results = sale.ctx, sale.results
    if ctx.losses:
        measure_pause(row, ctx, results, sale.jobs,
                      lambda skus: second_wave(ctx.stack.port, tokens, sale.jobs, sale.make, sale.seed + 1, skus))
    elif set(names) & set(HOST_FAULTS + NETWORK_FAULTS + GALERA_FAULTS) and ctx.struck:
        first = sale.load_began + (ctx.struck[0] - sale.began)  # the first fault on the load's clock
        row.n503 = sum(1 for r in results if r.status == 503 and r.finished > first)


def _paid(row: Row, payer: Payer, struck: list[float]) -> None:
    """The payers' figures into the row: pays and cancels answered 200 and 503,
    the pay pause; a 500 is noted (no promise broken, but no answer the API documents)."""
    row.pays, row.pay503 = payer.count(200), payer.count(503)
    row.pay_pause_s = payer.pause_after(struck)
    n500 = payer.count(500)
    if n500:
        row.note = "; ".join(filter(None, (row.note, f"{n500} pay/cancel answered 500")))


def run_once(stack: Stack, tokens: list[str], names: tuple[str, ...], *, stock: int, demand: int,
             concurrency: int, cluster: RedisNodes | None = None, run_index: int = 0,
             token_of: dict[int, str] | None = None) -> Row:
    row = Row(" + ".join(names), faults=names)
    ctx = _context(stack, cluster, stock, run_index)
    if stack.rabbit is not None:
        look_up_targets(ctx, names)
    sale = sale_of(ctx, tokens, demand, seed=hash(row.name) & 0xFFFF)
    if stack.galera is not None and token_of:
        sale.payer = Payer(stack.port, ctx.skus, token_of)
    worker_down = "worker-down" in names  # the worker stopped for the whole sale
    if worker_down:
        for worker in stack.workers:
            worker.stop()
    land(sale, row.name, names, stock=stock, concurrency=concurrency)
    if worker_down:
        stack.start_workers()
    _after_the_load(row, sale, tokens, names)
    if sale.payer is not None:
        _paid(row, sale.payer, ctx.struck)
    balances = judge(row, sale, stock, drained_from=time.monotonic())
    left = heal_after(ctx) if cluster is not None else ""
    if ctx.nodes or ctx.hosts:
        row.node = ",".join(ctx.nodes + ctx.hosts)
    verdict(row, ctx, balances, sale.results, left)
    if ctx.failures:
        row.ok = False
    row.note = "; ".join(filter(None, (row.note, *ctx.failures, *ctx.notes)))
    return row
