"""The whole sale, demand 20x the stock, through the gate and through the
naive MySQL-only path (benchmarks/naive.py): gate_vs_mysql."""
from __future__ import annotations

import time

from benchmarks import loadgen
from benchmarks.bench.settle import by_sku, check_sku, wait_locked_all
from benchmarks.bench.stack import Bench
from benchmarks.harness import HOST, say, stores
from benchmarks.harness.load import accepted_skus, order_requests

DEMAND = 20  # clicks per unit of stock


def whole_sale(bench: Bench) -> None:
    """[2]. Each path until its sale is over: the gate's until every acceptance
    is confirmed in MySQL, the naive path's until its last answer (it writes
    the order before it answers). The naive path's SKUs are checked here (their
    orders never went through Redis), the gate's with the others at the end."""
    stock, port, c, tokens = bench.sizes.whole_stock, bench.stack.port, bench.sizes.concurrency, bench.tokens
    demand = stock * DEMAND
    say(f"\n[2] whole sale, demand {demand} on stock {stock} (20x)")
    stocks = stores.split_stock(stock, len(bench.masters))
    gskus = stores.new_skus(stocks)
    t0 = time.perf_counter()
    gres = loadgen.run(host=HOST, port=port, concurrency=c, total_requests=demand, timeout_s=30,
                       make_request=order_requests("/api/v1/orders", tokens, gskus))
    gaccepted = by_sku(accepted_skus(gres), gskus)
    gdone = wait_locked_all(gaccepted)
    gate_s = max(max(x.finished for x in gres), gdone or float("inf")) - t0
    nskus = stores.new_skus(stocks)
    t0 = time.perf_counter()
    nres = loadgen.run(host=HOST, port=port, concurrency=c, total_requests=demand, timeout_s=60,
                       make_request=order_requests("/api/v1/bench/mysql-orders", tokens, nskus))
    naive_s = max(x.finished for x in nres) - t0
    refused = sum(1 for x in gres + nres if x.status == 503)
    say(f"    gate {gate_s:.2f} s (until all confirmed), mysql-only {naive_s:.2f} s"
        + (f"  !! {refused} refused 503" if refused else ""))
    bench.summary["gate_vs_mysql"] = naive_s / gate_s
    bench.sales.extend((s, n, gaccepted[s]) for s, n in zip(gskus, stocks))
    naccepted = by_sku(accepted_skus(nres, nskus), nskus)
    bench.checks.extend(check_sku(s, n, naccepted[s], gate=False) for s, n in zip(nskus, stocks))
