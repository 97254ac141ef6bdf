"""The load generators: which one drives every phase (chosen by measurement in
the warm-up), and driving one phase's load with it."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from benchmarks import loadgen, wrk
from benchmarks.bench.phase import CORES, Phase, served_rps
from benchmarks.harness import HOST, say
from benchmarks.harness.cpu import cpu_delta, cpu_seconds
from benchmarks.harness.load import accepted_skus, order_bodies, order_requests

# Below this many jobs the asyncio client sends the list (wrk needs a share
# per thread and a run long enough to be ended).
WRK_MIN_JOBS = 200
# Scores closer than this count as a tie, which wrk takes (choose).
TIE = 0.05


@dataclass
class Choice:
    """The generator every phase uses: "wrk" or "asyncio xN"; after wrk failed,
    the asyncio client in `procs` processes."""

    name: str = "asyncio x1"
    procs: int = 1
    wrk_failed: list[Exception] = field(default_factory=list)
    shown_503: bool = False  # the body of the first 503 was printed


CHOICE = Choice()


class Load:
    """One phase's requests, for either generator: `make` for the asyncio
    client; for wrk either `wrk_args` (path, tokens, body, key prefix: posts
    for a duration) or `jobs` (a fixed list of (method, path, token), each sent
    once; the asyncio client sends the same list through `make`). `record`: the
    phase sells, its 202s' order ids are kept (and with the asyncio client the
    token behind each, in `shared`)."""

    def __init__(self, make, wrk_args: dict | None = None, shared: dict | None = None,
                 jobs: list[tuple[str, str, str]] | None = None, record: bool = False):
        self.make, self.wrk_args, self.shared, self.jobs, self.record = make, wrk_args, shared, jobs, record

    @property
    def wrk_can(self) -> bool:
        return bool(self.wrk_args or (self.jobs and len(self.jobs) >= WRK_MIN_JOBS))


def order_load(path: str, tokens: list[str], sku_ids: list[str], *, key_prefix: str, record: bool = False,
               seed: int = 7) -> Load:
    """Purchases of the SKUs in turn (one SKU on the single Redis, one per
    master on a cluster)."""
    used: dict[int, str] | None = {} if record else None
    return Load(order_requests(path, tokens, sku_ids, used, seed=seed, key_prefix=key_prefix),
                {"path": path, "tokens": tokens, "bodies": order_bodies(sku_ids), "key_prefix": key_prefix},
                shared=used, record=record)


def _drive_wrk(port: int, load: Load, *, concurrency: int, seconds: float) -> tuple[dict, dict]:
    if load.jobs is not None:
        s = wrk.run_jobs(host=HOST, port=port, jobs=load.jobs, concurrency=concurrency, timeout_s=30)
    else:
        s = wrk.run(host=HOST, port=port, concurrency=concurrency, seconds=seconds, record=load.record,
                    **load.wrk_args)
    if not load.record:
        return s, {}
    # wrk reads each answer in its Lua, which cannot tell which connection (so
    # which token) it belongs to: the owners come from MySQL once the orders
    # are there (pay.owners_from_mysql)
    s.pop("order_ids")
    return s, {"accepted": s.pop("order_skus"), "owned": None, "last_ok": time.perf_counter()}


def _owned_orders(results, used: dict[int, str] | None) -> list[tuple[str, str]]:
    return [(json.loads(r.body)["order_id"], used[r.index]) for r in results if r.status == 202]


def drive(gen: str, port: int, load: Load, *, concurrency: int, seconds: float) -> tuple[dict, dict]:
    """Run the load with the generator `gen` ("wrk" or "asyncio xN"); the
    figures, and what it sold as Phase's accepted, owned and last_ok (empty
    unless the load records its sale)."""
    if gen == "wrk" and not CHOICE.wrk_failed and load.wrk_can:
        try:
            return _drive_wrk(port, load, concurrency=concurrency, seconds=seconds)
        except (OSError, RuntimeError) as exc:
            say(f"    wrk failed ({exc}); the asyncio client drives from now on")
            CHOICE.wrk_failed.append(exc)
    procs = int(gen.split("x")[1]) if gen.startswith("asyncio x") else CHOICE.procs
    total = len(load.jobs) if load.jobs is not None else None
    results = loadgen.run_procs(processes=procs, host=HOST, port=port, concurrency=concurrency,
                                make_request=load.make, duration_s=None if total is not None else seconds,
                                total_requests=total, timeout_s=30, shared=load.shared)
    refused = next((r.body for r in results if r.status == 503), None)
    if refused is not None and not CHOICE.shown_503:
        CHOICE.shown_503 = True
        say(f"    (the body of the first 503: {refused[:200]!r})")
    sold: dict = {}
    if load.record:
        sold = {"accepted": accepted_skus(results), "owned": _owned_orders(results, load.shared),
                "last_ok": max((x.finished for x in results if x.status == 202), default=time.perf_counter())}
    return loadgen.summarize(results), sold


def generator_name(load: Load) -> str:
    if CHOICE.name == "wrk" and not CHOICE.wrk_failed and load.wrk_can:
        return "wrk"
    return f"asyncio x{CHOICE.procs}"


def run_phase(name: str, port: int, load: Load, *, concurrency: int, seconds: float) -> Phase:
    gen = generator_name(load)
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    s, sold = drive(gen, port, load, concurrency=concurrency, seconds=seconds)
    return Phase(name, s, cpu_delta(cpu0), time.perf_counter() - t0, generator_name(load), **sold)


def _best_rates(port: int, load: Load, options: list[str], concurrency: int, seconds: float, passes: int,
                sold: dict[str, str] | None) -> dict[str, float]:
    """Each generator's best rate on one phase over `passes` tries, in
    alternating order (a shared machine's stalls only ever lower a rate)."""
    rates: dict[str, float] = {}
    for n in range(passes):
        for gen in options if n % 2 == 0 else options[::-1]:
            if gen == "wrk" and CHOICE.wrk_failed:
                continue
            failed = len(CHOICE.wrk_failed)
            s, got = drive(gen, port, load, concurrency=concurrency, seconds=seconds)
            if got and sold is not None:
                sold.update(got["accepted"])
            if len(CHOICE.wrk_failed) == failed:  # else it fell back: that figure was the asyncio client's
                rates[gen] = max(rates.get(gen, 0.0), served_rps(s))
    return rates


def _say_rates(name: str, rates: dict[str, float], best: str, passes: int) -> None:
    say(f"    generator for {name:<9}: " + ", ".join(f"{g} {r:.0f} req/s" for g, r in rates.items())
        + f" (best of {passes}; highest: {best})")
    asyncs = {g: r for g, r in rates.items() if g.startswith("asyncio")}
    if "wrk" in rates and rates["wrk"] > 1.15 * max(asyncs.values()):
        say(f"    !! wrk reaches {rates['wrk'] / max(asyncs.values()):.2f}x the asyncio client on {name}: "
            "the client would be that phase's limit")
    if "wrk" in rates and max(asyncs.values()) > 1.15 * rates["wrk"]:
        say(f"    !! the asyncio client reaches {max(asyncs.values()) / rates['wrk']:.2f}x wrk on {name}")


def choose(loads: dict[str, tuple[int, Load]], concurrency: int, seconds: float = 2,
           sold: dict[str, str] | None = None, passes: int = 2) -> None:
    """Drive each phase briefly with every generator (wrk, the asyncio client
    in one process, in one per core) and print what each reaches: a generator
    that is the limit reaches less. The ratios compare phases, so one generator
    drives them all: the one nearest the best on every phase (the highest sum
    of its rate over the phase's best; wrk on a tie); the asyncio client's
    better process count is kept for a fall-back. `sold` collects the order ids
    a selling load's trials accepted."""
    options = ["asyncio x1"] + ([f"asyncio x{CORES}"] if CORES > 1 else []) + (["wrk"] if wrk.available() else [])
    score = dict.fromkeys(options, 0.0)
    for name, (port, load) in loads.items():
        rates = _best_rates(port, load, options, concurrency, seconds, passes, sold)
        best = max(rates, key=rates.get)
        for gen, rate in rates.items():
            score[gen] += rate / max(1e-9, rates[best])
        _say_rates(name, rates, best, passes)
    if CHOICE.wrk_failed:
        score.pop("wrk", None)
    chosen = max(score, key=score.get)
    # Within the noise of a shared machine, wrk: it takes the least CPU from the
    # servers' two cores, and the same generator run after run compares better.
    tie = chosen != "wrk" and score.get("wrk", 0.0) >= (1 - TIE) * score[chosen]
    if tie:
        chosen = "wrk"
    asyncs = {g: v for g, v in score.items() if g.startswith("asyncio")}
    CHOICE.procs = int((chosen if chosen in asyncs else max(asyncs, key=asyncs.get)).split("x")[1])
    CHOICE.name = chosen
    say(f"    every phase: {chosen} (ratios compare phases driven alike; score, the sum over the phases "
        "of the rate / the phase's best: " + ", ".join(f"{g} {v:.2f}" for g, v in score.items())
        + (f"; wrk within {TIE:.0%} of the best" if tie else "") + ")")
