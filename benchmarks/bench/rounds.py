"""The interleaved rounds: baseline, floor, gunicorn floor, selling, sold out
and pay, one after the other in each round, so every ratio compares phases that
met the same machine; reported as the median over the rounds and the spread."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

from benchmarks import loadgen
from benchmarks.bench import generators
from benchmarks.bench.components import component_table
from benchmarks.bench.generators import order_load, run_phase
from benchmarks.bench.loads import floor_requests, owners_from_mysql, pay_load
from benchmarks.bench.phase import CORES, CPU_KEYS, LOADGEN_LIMIT, Phase, median_spread
from benchmarks.bench.settle import by_sku, wait_locked_all, wait_quiet
from benchmarks.bench.stack import Bench
from benchmarks.harness import HOST, progress, say, stores
from benchmarks.harness.cpu import cpu_delta, cpu_seconds
from benchmarks.harness.load import order_requests

# The phases of a round, in the order they run.
PHASES = ("baseline", "floor", "gunicorn floor", "selling", "sold out", "pay")
SELLING_STOCK = 10 ** 5  # more than a phase can sell


@dataclass
class Rounds:
    warm: list[str]       # the baseline's SKU: it takes nothing
    out: list[str]        # the sold-out SKUs, one per master
    rows: dict[str, list[Phase]] = field(default_factory=lambda: {k: [] for k in PHASES})
    lags: list[float] = field(default_factory=list)  # last acceptance -> all confirmed, per round
    statements: int = 0   # MySQL statements of the web processes in the purchase phases
    clicks: int = 0       # purchase requests served in those phases


def warm_up(bench: Bench) -> Rounds:
    """The sold-out SKUs sold out, then the warm-up (token records, code paths),
    which measures the generators too: [0]."""
    stack, tokens, c = bench.stack, bench.tokens, bench.sizes.concurrency
    rounds = Rounds(warm=[stores.new_sku(10 ** 6)], out=stores.new_skus(1, limit=10))
    loadgen.run(host=HOST, port=stack.port, concurrency=c, total_requests=20 * len(rounds.out),
                make_request=order_requests("/api/v1/orders", tokens, rounds.out, key_prefix="sell-out"))
    say("\n[0] the load generator per phase, by measurement")
    warm_sale = stores.new_skus(10 ** 6, limit=10 ** 6)
    warm_sold: dict[str, str] = {}
    generators.choose({
        "baseline": (stack.port, order_load("/api/v1/baseline", tokens, rounds.warm, key_prefix="warm-b")),
        "floor": (stack.floor_port, floor_requests(tokens, key_prefix="warm-f")),
        "selling": (stack.port, order_load("/api/v1/orders", tokens, warm_sale, key_prefix="warm-s", record=True)),
        "sold out": (stack.port, order_load("/api/v1/orders", tokens, rounds.out, key_prefix="warm-o")),
    }, c, sold=warm_sold)
    bench.sales.extend((s, 10 ** 6, ids) for s, ids in by_sku(warm_sold, warm_sale).items())
    return rounds


def one_round(bench: Bench, rounds: Rounds, r: int) -> None:
    """Round r's phases in order; the selling phase runs on until its last
    confirm (its tail), pay until its last give."""
    stack, tokens, rows = bench.stack, bench.tokens, rounds.rows
    kw = {"concurrency": bench.sizes.concurrency, "seconds": bench.sizes.seconds}
    rows["baseline"].append(run_phase("baseline", stack.port, order_load(
        "/api/v1/baseline", tokens, rounds.warm, key_prefix=f"b{r}"), **kw))
    rows["floor"].append(run_phase("floor", stack.floor_port, floor_requests(tokens, key_prefix=f"f{r}"), **kw))
    rows["gunicorn floor"].append(run_phase(
        "gunicorn floor", stack.gfloor_port, floor_requests(tokens, key_prefix=f"g{r}"), **kw))
    skus = stores.new_skus(SELLING_STOCK, limit=10 ** 6)
    before = stores.web_statements()
    sell = run_phase("selling", stack.port, order_load("/api/v1/orders", tokens, skus, record=True, seed=r,
                                                       key_prefix=f"s{r}"), **kw)
    rows["selling"].append(sell)
    accepted = by_sku(sell.accepted, skus)
    tail0, t0 = cpu_seconds(), time.perf_counter()
    done = wait_locked_all(accepted)
    sell.add_tail(cpu_delta(tail0), time.perf_counter() - t0)
    rounds.lags.append((done - sell.last_ok) if done else float("nan"))
    owned = sell.owned if sell.owned is not None else owners_from_mysql(skus, sell.accepted, bench.token_of)
    soldout = run_phase("sold out", stack.port, order_load("/api/v1/orders", tokens, rounds.out,
                                                           key_prefix=f"o{r}"), **kw)
    rows["sold out"].append(soldout)
    rounds.statements += stores.web_statements() - before
    rounds.clicks += sell.requests + soldout.requests
    rows["pay"].append(run_phase("pay", stack.port, pay_load(owned, seed=r), **kw))
    tail0, t0 = cpu_seconds(), time.perf_counter()
    if not wait_quiet(skus, timeout=20):
        say(f"    !! r{r + 1}: the pays' and cancels' moves and gives not all done 20 s after the phase")
    rows["pay"][-1].add_tail(cpu_delta(tail0), time.perf_counter() - t0)
    bench.sales.extend((s, SELLING_STOCK, ids) for s, ids in accepted.items())
    bench.selling_skus.update(skus)
    for name in PHASES:
        say(f"    r{r + 1} " + rows[name][-1].line())


def run_rounds(bench: Bench) -> Rounds:
    """The warm-up, then the rounds: [0] and [1]; their figures into the summary."""
    rounds = warm_up(bench)
    sizes = bench.sizes
    say(f"\n[1] {sizes.rounds} interleaved rounds of {sizes.seconds:.0f} s phases, {sizes.concurrency} connections, "
        f"{bench.args.web_workers} web processes ({bench.args.server}, {_slots()} requests running and up to "
        f"{bench.stack.queue} waiting each)")
    for r in range(sizes.rounds):
        progress(f"round {r + 1}/{sizes.rounds}")
        one_round(bench, rounds, r)
    report(bench, rounds)
    return rounds


def _slots() -> int:
    from seckill_site import webserver

    return webserver.SLOTS


def spread(rows: dict[str, list[Phase]]) -> dict[str, list[float]]:
    """Each ratio and CPU figure of the summary, one value per round."""
    def ratios(a: str, b: str, field: str = "rps") -> list[float]:
        return [getattr(x, field) / getattr(y, field) for x, y in zip(rows[a], rows[b]) if getattr(y, field)]

    return {
        "selling_ratio": ratios("selling", "baseline"),
        "soldout_ratio": ratios("sold out", "baseline"),
        "floor_ratio": ratios("sold out", "floor"),
        "pay_ratio": ratios("pay", "baseline"),
        "pay_p99_ratio": ratios("pay", "baseline", "p99"),
        "pay_p99_ms": [p.p99 for p in rows["pay"]],  # the pay phase's own p99 (ms): single server vs Galera
        "soldout_p99_ratio": ratios("sold out", "baseline", "p99"),
        "gunicorn_floor_ratio": ratios("sold out", "gunicorn floor"),
        # CPU ms per request: the web tier's, and every server's on the selling click
        "web_ms_soldout": [p.cpu_ms["web"] for p in rows["sold out"]],
        "web_ms_selling": [p.cpu_ms["web"] for p in rows["selling"]],
        "web_ms_pay": [p.cpu_ms["web"] for p in rows["pay"]],
        "cpu_ms_selling": [p.cpu_ms_all for p in rows["selling"]],
        "cpu_ms_selling_net": [sell.cpu_ms_net(min(f.stores_per_s(), g.stores_per_s()))
                               for sell, f, g in zip(rows["selling"], rows["floor"], rows["gunicorn floor"])],
    }


def _say_cpu(rows: dict[str, list[Phase]], summary: dict[str, float], c: int) -> None:
    """The CPU per request of every phase, the generator's share, the 503s shed."""
    for name in rows:
        cpu = {k: statistics.median(p.cpu_ms[k] for p in rows[name]) for k in CPU_KEYS}
        share = max(p.loadgen_share for p in rows[name])
        gens = "/".join(sorted({p.generator for p in rows[name]}))
        say(f"    CPU ms/request, {name:<14}: " + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items())
            + f", all {statistics.median(p.cpu_ms_all for p in rows[name]):.2f}"
            + f"  | loadgen ({gens}) up to {share:.0%} of the machine"
            + ("  !! load generator is the limit" if share > LOADGEN_LIMIT else ""))
    summary["loadgen_cpu_share"] = max(p.loadgen_share for ps in rows.values() for p in ps)
    summary["shed"] = sum(p.shed for ps in rows.values() for p in ps)
    if summary["shed"]:
        say(f"    !! {summary['shed']:.0f} requests of the phases were refused 503 (a backlog full at "
            f"{c} connections): the rates and CPU figures count only the requests served")
    say("    the stores' CPU while no request touched them (floor phases: the shared servers' other "
        "clients, our worker's and beat's idle work): "
        + ", ".join(f"{min(f.stores_per_s(), g.stores_per_s()) * 1000:.0f}"
                    for f, g in zip(rows["floor"], rows["gunicorn floor"]))
        + " CPU-ms/s by round; cpu_ms_selling_net takes it off cpu_ms_selling")
    say(f"    (loadgen CPU share: the generator's CPU seconds / (phase seconds x {CORES} cores); "
        f"above {LOADGEN_LIMIT:.0%} it is the limit)")


def report(bench: Bench, rounds: Rounds) -> None:
    """The rounds' medians and spreads printed and put into the summary."""
    rows, summary = rounds.rows, bench.summary
    say("\n    ratio / CPU ms       median   (min - max over the rounds)")
    for k, v in spread(rows).items():
        m, lo, hi = median_spread(v)
        summary[k] = m
        say(f"    {k:<20} {m:6.2f}   ({lo:.2f} - {hi:.2f})")
    _say_cpu(rows, summary, bench.sizes.concurrency)
    component_table(rows, summary)
    summary["floor_rps"] = statistics.median(p.rps for p in rows["floor"])
    summary["baseline_rps"] = statistics.median(p.rps for p in rows["baseline"])
    summary["gunicorn_floor_rps"] = statistics.median(p.rps for p in rows["gunicorn floor"])
    summary["confirm_lag_s"] = max(rounds.lags)
    summary["mysql_per_click"] = rounds.statements / max(1, rounds.clicks)
    say(f"    confirm lag (last acceptance -> all confirmed): {', '.join(f'{x:.2f}' for x in rounds.lags)} s")
    say(f"    MySQL statements by the web processes: {rounds.statements} for {rounds.clicks} purchase requests")
