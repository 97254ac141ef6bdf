"""One run's sale: its SKUs, its clicks (one in ten sent again, as a retry),
and the load with the faults landing one right after the other, from about a
quarter into the sale."""
from __future__ import annotations

import json
import random
import threading
import time
import uuid
from dataclasses import dataclass, field

from benchmarks import loadgen
from benchmarks.chaos.context import Context, clock
from benchmarks.chaos.faults import FAULTS
from benchmarks.chaos.nodes import RedisNodes
from benchmarks.chaos.payer import Payer
from benchmarks.harness import HOST, progress, stores

# (token, Idempotency-Key, SKU) per request
Job = tuple[str, str, str]


def fresh_clicks(tokens: list[str], n: int, rnd: random.Random, skus: list[str]) -> list[Job]:
    """(token, new key, SKU) per request, the SKUs in turn."""
    return [(rnd.choice(tokens), uuid.uuid4().hex, skus[i % len(skus)]) for i in range(n)]


def clicks(tokens: list[str], n: int, seed: int, skus: list[str]) -> list[Job]:
    """(token, key, SKU) per request; one in ten is sent again later (a retry)."""
    rnd = random.Random(seed)
    first = fresh_clicks(tokens, n, rnd, skus)
    out = list(first)
    for job in rnd.sample(first, n // 10):
        out.insert(rnd.randrange(len(out) // 2, len(out) + 1), job)
    return out


def sale_skus(cluster: RedisNodes | None, stock: int, run_index: int) -> tuple[list[str], int]:
    """The SKUs of one sale and how many of them the Redis faults aim at (the
    first ones): one SKU on the single Redis; on a cluster two on one master
    (the run's turn) and one on each other master."""
    if cluster is None:
        return [stores.new_sku(stock, limit=4, prefix="CHAOS")], 1
    from core.adapters.redis_py import key_slot
    from inventory.redis.keys import sku_keys

    layout = cluster.layout()
    masters = list(dict.fromkeys(port for _, _, port in layout))
    aimed = masters[run_index % len(masters)]
    want = {aimed: 2, **{m: 1 for m in masters if m != aimed}}
    chosen: dict[int, list[str]] = {m: [] for m in masters}
    while any(len(chosen[m]) < n for m, n in want.items()):
        sku_id = f"CHAOS-{uuid.uuid4().hex[:8]}"
        slot = key_slot(sku_keys(sku_id).stock.encode())
        owner = next(port for start, end, port in layout if start <= slot <= end)
        if len(chosen[owner]) < want[owner]:
            chosen[owner].append(sku_id)
    ordered = chosen[aimed] + [s for m in masters if m != aimed for s in chosen[m]]
    return [stores.new_sku(stock, limit=4, sku_id=s) for s in ordered], want[aimed]


@dataclass
class Sale:
    """The run's clicks, how each is sent, and what the load got back."""

    ctx: Context
    jobs: list[Job]
    make: loadgen.MakeRequest
    seed: int
    results: list[loadgen.Result] = field(default_factory=list)
    load_began: float = 0.0  # clock() when the load started
    began: float = 0.0       # time.time() then (the faults' moments are time.time(): the confirm gap)
    load_over: float = 0.0   # time.time() when its last answer came
    payer: Payer | None = None  # buyers paying and cancelling the confirmed orders meanwhile (--cluster)


def sale_of(ctx: Context, tokens: list[str], demand: int, seed: int) -> Sale:
    jobs = clicks(tokens, demand, seed=seed, skus=ctx.skus)
    bodies = {sku: json.dumps({"sku_id": sku, "quantity": 1}).encode() for sku in ctx.skus}

    def make(i: int):
        token, key, sku = jobs[i]
        return ("POST", "/api/v1/orders", {"Authorization": f"Token {token}", "Content-Type": "application/json",
                                           "Idempotency-Key": key}, bodies[sku])

    return Sale(ctx, jobs, make, seed)


def _a_quarter_sold(ctx: Context, stock: int, timeout: float = 20) -> None:
    """Until the aimed SKU sold a quarter of its stock (or `timeout`)."""
    from core.redis.errors import RedisError
    from inventory.redis import live as redis_live

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            live = redis_live.live_stock(sku_id=ctx.sku_id)
            if live and live.available <= stock * 3 // 4:
                return
        except RedisError:
            pass
        time.sleep(0.02)


def land(sale: Sale, name: str, names: tuple[str, ...], *, stock: int, concurrency: int) -> None:
    """The load, with the faults `names` landing one right after the other from
    about a quarter into the sale; returns once the load is over."""
    from django.db import close_old_connections

    ctx = sale.ctx
    load = threading.Thread(target=lambda: sale.results.extend(loadgen.run(
        host=HOST, port=ctx.stack.port, concurrency=concurrency, make_request=sale.make,
        total_requests=len(sale.jobs), timeout_s=30)))
    load.start()
    if sale.payer is not None:
        sale.payer.start()
    sale.load_began, sale.began = clock(), time.time()
    _a_quarter_sold(ctx, stock)
    for fault in names:
        progress(f"{name}: {fault}, {clock() - sale.load_began:.1f} s into the load")
        struck, before = len(ctx.struck), time.time()
        FAULTS[fault](ctx)
        if len(ctx.struck) == struck:  # a fault that marks no moment of its own landed when it was called
            ctx.struck.append(before)
        close_old_connections()
        if ctx.losses:
            progress(f"{name}: {fault} over, {clock() - ctx.losses[0]:.1f} s after the loss")
    ctx.faults_over = clock()
    load.join()
    sale.load_over = time.time()
    progress(f"{name}: load over after {clock() - sale.load_began:.1f} s")
    for t in ctx.recoveries:  # a database node's return, under way since its fault
        t.join()
    if ctx.recoveries:
        progress(f"{name}: the database nodes back, {clock() - sale.load_began:.1f} s into the load")
    if sale.payer is not None:
        sale.payer.finish(after=max(ctx.struck, default=None))
    if ctx.recoveries:  # the front shut this thread's session with the node it went to
        from django.db import connections

        connections.close_all()
    if ctx.losses:
        progress(f"{name}: load over, {clock() - ctx.losses[0]:.1f} s after the loss")
