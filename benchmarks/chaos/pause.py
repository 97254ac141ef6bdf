"""The pause after a Redis loss: from the loss to each SKU's first new order
answered to a request sent after it, with a second wave of fresh clicks for a
SKU the load left no sale after."""
from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable

from benchmarks import loadgen
from benchmarks.chaos.context import Context, clock
from benchmarks.chaos.report import Row
from benchmarks.chaos.sale import Job, fresh_clicks
from benchmarks.harness import HOST, progress

# The second wave: two connections, a click each every WAVE_GAP_S, for up to WAVE_S.
WAVE_CLICKS, WAVE_GAP_S, WAVE_S = 300, 0.2, 30.0
# A SKU whose first sale after a loss took this long paused (the paused column);
# sales that merely queued behind others take less.
PAUSED_S = 1.0


def answer_of(r: loadgen.Result) -> dict:
    try:
        return json.loads(r.body)
    except ValueError:
        return {}


def is_sold_out(r: loadgen.Result) -> bool:
    return r.status == 409 and answer_of(r).get("code") == "sold_out"


def first_sale_after(results: list[loadgen.Result], moment: float, of: Callable[[loadgen.Result], bool]
                     = lambda r: True) -> float | None:
    """Seconds from `moment` to the first new order (a 202 that is no replay)
    answered to a request sent after it (of those `of` picks); None when there was none."""
    done = [r.finished for r in results
            if r.status == 202 and r.started > moment and of(r) and not answer_of(r).get("replayed")]
    return min(done) - moment if done else None


def longest_gap(results: list[loadgen.Result], moment: float, of: Callable[[loadgen.Result], bool]
                = lambda r: True) -> float | None:
    """The longest stretch from `moment` without a new order answered to a
    request sent after it (of those `of` picks), up to the last such order;
    None when there was none. After a network fault the minority side may go
    on selling for a while (a cut-off master keeps a client until it stops
    itself): the first sale after the fault is then no measure of the pause,
    the silence that follows is."""
    done = sorted(r.finished for r in results
                  if r.status == 202 and r.started > moment and of(r) and not answer_of(r).get("replayed"))
    if not done:
        return None
    return max(b - a for a, b in zip([moment, *done], done))


def second_wave(port: int, tokens: list[str], jobs: list[Job], make: loadgen.MakeRequest,
                seed: int, skus: list[str]) -> list[loadgen.Result]:
    """Fresh clicks (new keys, the same buyers), paced, until the first 202, a
    sold-out answer or WAVE_S, on each of the SKUs at once (a wave each).
    `jobs` grows by them and their results' indexes point into it, like the load's."""
    bases = []
    for i, sku in enumerate(skus):
        bases.append(len(jobs))
        jobs.extend(fresh_clicks(tokens, WAVE_CLICKS, random.Random(seed + i), [sku]))
    out: list[loadgen.Result] = []

    def wave(base: int) -> None:
        results = loadgen.run(host=HOST, port=port, concurrency=2, make_request=lambda i: make(base + i),
                              total_requests=WAVE_CLICKS, duration_s=WAVE_S, timeout_s=10, gap_s=WAVE_GAP_S,
                              stop_when=lambda r: r.status == 202 or is_sold_out(r))
        for r in results:
            r.index += base
        out.extend(results)

    threads = [threading.Thread(target=wave, args=(base,)) for base in bases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def measure_pause(row: Row, ctx: Context, results: list[loadgen.Result], jobs: list[Job],
                  wave: Callable[[list[str]], list[loadgen.Result]]) -> None:
    """pause_s, n503 (and on a cluster paused) of a Redis-loss run. Each SKU
    the load left no sale after the (last) loss gets a second wave, whose
    results join `results` first."""
    moment = ctx.losses[-1]

    def pauses() -> dict[str, float | None]:
        return {sku: first_sale_after(results, moment, lambda r, sku=sku: jobs[r.index][2] == sku)
                for sku in ctx.skus}

    found = pauses()
    if any(p is None for p in found.values()):
        progress(f"{row.name}: a second wave, {clock() - moment:.1f} s after the loss")
        results.extend(wave([sku for sku, p in found.items() if p is None]))
        found = pauses()
    from benchmarks.chaos.plan import NETWORK_FAULTS

    if set(row.faults) & set(NETWORK_FAULTS):  # the silence, not the first sale (see longest_gap)
        def last_sale(sku: str) -> float:
            return max((r.finished for r in results if r.status == 202 and jobs[r.index][2] == sku), default=0.0)

        quiet = [sku for sku in ctx.skus if last_sale(sku) < ctx.faults_over
                 and not any(is_sold_out(r) for r in results if jobs[r.index][2] == sku)]
        if quiet:  # no sale since the cut was healed: fresh clicks show when they sell again
            progress(f"{row.name}: a second wave after the heal")
            results.extend(wave(quiet))
        found = {sku: longest_gap(results, moment, lambda r, sku=sku: jobs[r.index][2] == sku) for sku in ctx.skus}
    progress(f"{row.name}: pause per SKU " + " ".join("-" if p is None else f"{p:.1f}" for p in found.values()))
    measured = [p for p in found.values() if p is not None]
    row.pause_s = max(measured) if measured else None
    row.n503 = sum(1 for r in results if r.status == 503 and r.finished > ctx.losses[0])
    notes = []
    for sku, p in found.items():
        if p is None:
            sold_out = any(is_sold_out(r) for r in results if r.finished > moment and jobs[r.index][2] == sku)
            if sold_out and sku not in ctx.skus[:ctx.aimed]:
                continue  # a SKU of another master sold out while the aimed ones paused: as it should
            what = "sold out" if sold_out else f"none within the {WAVE_S:.0f} s wave"
            notes.append(f"no sale after the loss: {what}" + (f" ({sku})" if len(ctx.skus) > 1 else ""))
    if ctx.cluster is not None:
        paused = {sku for sku, p in found.items() if p is not None and p >= PAUSED_S}
        row.paused = f"{len(paused)}/{len(ctx.skus)}"
        others = [p for sku, p in found.items() if p is not None and sku not in ctx.skus[:ctx.aimed]]
        row.other_pause_s = max(others) if others else None
        elsewhere = paused - set(ctx.skus[:ctx.aimed])
        # (a web kill pauses every SKU while it restarts, a RabbitMQ node lost every SKU's publishes)
        if elsewhere and not set(row.faults) & {"web-kill", "web-host-kill", "rabbitmq-node-kill",
                                                  "rabbitmq-node-restart", "rabbitmq-node-isolate",
                                                  "web-redis-cut", "worker-broker-cut"}:
            notes.append(f"paused on another master: {', '.join(sorted(elsewhere))} "
                         f"({', '.join(f'{found[s]:.1f}' for s in sorted(elsewhere))} s)")
    row.note = "; ".join(notes)
