"""The backlog drain: the worker stopped during a sale, then started; the
orders confirmed per second from the moment its consumers are up, with one
confirm partition and with N (drain_rate_1, drain_rate_n)."""
from __future__ import annotations

import random
import statistics
import time
import uuid

from benchmarks import loadgen
from benchmarks.bench.phase import CPU_KEYS
from benchmarks.bench.settle import by_sku, wait_locked_all
from benchmarks.bench.stack import Bench
from benchmarks.harness import HOST, processes, progress, say, stores
from benchmarks.harness.cpu import cpu_delta, cpu_seconds
from benchmarks.harness.load import accepted_skus, order_requests


def _partitions_module():
    """The module of the code's confirm partitions (SECKILL_CONFIRM_PARTITIONS),
    or None: the benchmark also measures an older checkout, for a before and
    after, whose inventory.messages was one module and may have had none."""
    try:
        from inventory.messages import queues
    except ImportError:  # a checkout of before the package
        from inventory import messages as queues
    return queues if hasattr(queues, "partition_of") and hasattr(queues, "confirm_queues") else None


def partitions_supported() -> bool:
    """The code has confirm partitions."""
    return _partitions_module() is not None


def partition_of(sku_id: str, partitions: int) -> int:
    """The confirm partition of the SKU among `partitions` (the publisher's
    own function, under that setting)."""
    if partitions <= 1:
        return 0
    from django.test import override_settings

    with override_settings(SECKILL_CONFIRM_PARTITIONS=partitions):
        return int(_partitions_module().partition_of(sku_id))


def backlog_layout(partitions: int, masters: list[str]) -> list[tuple[str, int]]:
    """(master, partition) of each SKU of a drain: SKU ids drawn until every
    master and every partition holds one (a SKU joins only when it adds one),
    so each drain's SKUs spread alike over both."""
    seen: list[tuple[str, int]] = []
    masters_left, parts_left = set(masters), set(range(partitions))
    while masters_left or parts_left:
        sku_id = f"BENCH-{uuid.uuid4().hex[:8]}"
        m, k = stores.master_of(sku_id), partition_of(sku_id, partitions)
        if m in masters_left or k in parts_left:
            seen.append((m, k))
            masters_left.discard(m)
            parts_left.discard(k)
    return seen


def layout_skus(layout: list[tuple[str, int]], partitions: int, stocks: list[int]) -> list[str]:
    """New SKUs, one for each (master, partition) of the layout (its partitions
    of `partitions`, whatever the drain runs with), with those stocks."""
    out = []
    for (m, k), stock in zip(layout, stocks):
        for _ in range(100_000):
            sku_id = f"BENCH-{uuid.uuid4().hex[:8]}"
            if stores.master_of(sku_id) == m and partition_of(sku_id, partitions) == k:
                break
        else:
            raise SystemExit(f"no SKU id found for {m}, partition {k} of {partitions}")
        out.append(stores.new_sku(stock, limit=10 ** 6, sku_id=sku_id))
    return out


def _sale_with_worker_down(bench: Bench, partitions: int, skus: list[str]) -> dict[str, set[str]]:
    """The worker stopped, the SKUs sold out (request i buys skus[i % n]: the sale
    is over once each answered sold out); with partitions > 1 through a web tier
    of its own that publishes to as many. The accepted order ids by SKU."""
    sold_out: set[int] = set()

    def all_sold_out(x) -> bool:
        if x.status == 409 and b"sold_out" in x.body:
            sold_out.add(x.index % len(skus))
        return len(sold_out) == len(skus)

    bench.stack.worker.stop()
    web, port = None, bench.stack.port
    if partitions > 1:
        port = 19500 + random.randint(0, 499)
        web = processes.start_web(port, bench.args.web_workers, server=bench.args.server, log="bench-web-parts.log",
                                  extra={"SECKILL_WEB_QUEUE": str(bench.stack.queue), **_env(partitions)})
    try:
        res = loadgen.run(host=HOST, port=port, concurrency=bench.sizes.concurrency, timeout_s=30,
                          make_request=order_requests("/api/v1/orders", bench.tokens, skus,
                                                      key_prefix=f"backlog{partitions}"),
                          stop_when=all_sold_out)
    finally:
        if web is not None:
            web.stop()
    return by_sku(accepted_skus(res), skus)


def _env(partitions: int) -> dict[str, str]:
    """What the publisher and the consumers must agree on."""
    return {"SECKILL_CONFIRM_PARTITIONS": str(partitions)} if partitions > 1 else {}


def _drain_workers(partitions: int, workers: int) -> list:
    """The drain's worker(s), not waited for: one as the run's, or `workers`
    named drain1..n, each SECKILL_WORKER_INDEX i of SECKILL_WORKERS n, so they
    split the active partitions between them."""
    if workers == 1:
        return [processes.start_worker(wait=False, extra=_env(partitions))]
    return [processes.start_worker(log=f"bench-worker-drain{i}.log", wait=False, name=f"drain{i}@%h",
                                   extra={**_env(partitions), "SECKILL_WORKER_INDEX": str(i),
                                          "SECKILL_WORKERS": str(workers)})
            for i in range(1, workers + 1)]


def active_spread(partitions: int) -> str:
    """Which worker is each partition's active consumer, as the broker says
    (`rabbitmqctl list_consumers` of the machine's node: "0:drain1 1:drain2 ..."),
    or "?" where it cannot tell (a broker cluster on other ports)."""
    import json
    import subprocess

    from inventory.messages.queues import confirm_queue_name

    try:
        out = subprocess.run(["rabbitmqctl", "list_consumers", "-q", "--formatter", "json", "queue_name",
                              "consumer_tag", "active"], capture_output=True, text=True, timeout=60,
                             check=True).stdout
        consumers = json.loads(out)
    except (OSError, subprocess.SubprocessError, ValueError):
        return "?"
    with override_partitions(partitions):
        names = {confirm_queue_name(k): k for k in range(partitions)}
    active = {names[c["queue_name"]]: c["consumer_tag"].split("@", 1)[0] for c in consumers
              if c.get("queue_name") in names and c.get("active")}
    return " ".join(f"{k}:{active.get(k, '?')}" for k in range(partitions))


def override_partitions(partitions: int):
    from django.test import override_settings

    return override_settings(SECKILL_CONFIRM_PARTITIONS=partitions)


def backlog_drain(bench: Bench, partitions: int, layout: list[tuple[str, int]], layout_parts: int,
                  workers: int = 1) -> float:
    """The worker stopped during a sale of the backlog's units over the layout's
    SKUs (drawn as the layout says, of `layout_parts` partitions, so the
    1-partition drain's SKUs sit where the N-partition drain's do), then
    started with SECKILL_CONFIRM_PARTITIONS (`workers` of them, splitting the
    active partitions): orders confirmed per second from the moment every
    consumer is up; afterwards the worker runs as before. The SKUs join the
    run's sales; returns the rate."""
    stocks = stores.split_stock(bench.sizes.backlog_stock, len(layout))
    skus = layout_skus(layout, layout_parts, stocks)
    split = _sale_with_worker_down(bench, partitions, skus)
    accepted = set().union(*split.values())
    progress(f"{len(accepted)} accepted with the worker down; starting {workers} ({partitions} partitions)")
    started = _drain_workers(partitions, workers)
    bench.stack.worker = started[0]
    with override_partitions(partitions):
        # every partition's consumer of every worker (where the code has partitions)
        processes.wait_consuming(consumers=workers)
    t0 = time.perf_counter()
    cpu0 = cpu_seconds()
    done = wait_locked_all(split, timeout=300)
    drain_s = time.perf_counter() - t0
    rate = len(accepted) / drain_s if done else 0.0
    cpu = cpu_delta(cpu0)
    spread = f"; active: {active_spread(partitions)}" if workers > 1 and partitions_supported() else ""
    say(f"    {partitions} partition{'s' if partitions > 1 else ''}, {workers} worker{'s' if workers > 1 else ''}: "
        f"{len(accepted)} accepted while the worker was down; all confirmed {drain_s:.2f} s after its consumers "
        f"came up: {rate:.0f} orders/s" + spread + ("" if done else "  !! not all confirmed within 300 s"))
    say("    CPU ms per drained order: " + ", ".join(
        f"{k} {1000 * cpu[k] / max(1, len(accepted)):.3f}" for k in CPU_KEYS))
    if partitions > 1 or workers > 1:  # back to the one worker and partition the rest of the run publishes to
        for worker in started:
            worker.stop()
        bench.stack.worker = processes.start_worker()
    bench.sales.extend((s, k, split[s]) for s, k in zip(skus, stocks))
    return rate


def drains(bench: Bench) -> None:
    """[3]: the drain with 1 confirm partition, then with --partitions N, on one
    layout for both (every partition of N and every master holds one of the SKUs)."""
    n = bench.args.partitions
    say(f"\n[3] backlog: the worker stopped during a sale of {bench.sizes.backlog_stock} units (beat sweeping), "
        "then started" + (f"; with 1 confirm partition, then {n}" if n > 1 else ""))
    if n > 1 and not partitions_supported():
        say(f"    !! this code has no confirm partitions (inventory.messages.queues.partition_of): no {n}-partition "
            "drain; partitions=1, drain_rate_n is the 1-partition figure")
        n = 1
    layout = backlog_layout(n, bench.masters)
    say(f"    {len(layout)} SKUs a drain: " + ", ".join(f"{m} partition {k}" for m, k in layout))
    rates = {parts: backlog_drain(bench, parts, layout, n) for parts in ([1, n] if n > 1 else [1])}
    bench.summary["drain_rate"] = bench.summary["drain_rate_1"] = rates[1]
    bench.summary["drain_rate_n"] = rates[n]
    bench.summary["partitions"] = n
    if n > 1:
        worker_drains(bench, n, layout, first=rates[n])


def worker_drains(bench: Bench, n: int, layout: list[tuple[str, int]], first: float) -> None:
    """[3b]: the N-partition drain with two workers splitting the active
    partitions (SECKILL_WORKER_INDEX 1 and 2 of 2) against one, interleaved
    (two, one, two after the one above) so a drift of the machine falls on
    both alike; drain_rate_n2 is the two workers' median, drain_rate_n1 the
    one's (with the run above)."""
    say(f"\n[3b] the {n}-partition drain with two workers against one, interleaved")
    one, two = [first], []
    for workers in (2, 1, 2):
        rate = backlog_drain(bench, n, layout, n, workers=workers)
        (two if workers == 2 else one).append(rate)
    bench.summary["drain_rate_n1"] = statistics.median(one)
    bench.summary["drain_rate_n2"] = statistics.median(two)
    say(f"    one worker {' '.join(f'{r:.0f}' for r in one)}, two workers {' '.join(f'{r:.0f}' for r in two)} "
        f"orders/s: two / one = {bench.summary['drain_rate_n2'] / max(1.0, bench.summary['drain_rate_n1']):.2f}")
