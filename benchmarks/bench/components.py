"""CPU ms per click by component (web, Redis, RabbitMQ, worker, MariaDB) of
the sold-out, selling and pay phases: the summary's cpu_ms_<component>_<phase>,
the figures of a capacity plan."""
from __future__ import annotations

import statistics

from benchmarks.bench.phase import STORE_KEYS, Phase, median_spread
from benchmarks.harness import say

# The phases whose CPU per click by component is a summary key
# (cpu_ms_<component>_<phase>), for the capacity plan.
COMPONENT_PHASES = {"sold out": "soldout", "selling": "selling", "pay": "pay"}
COMPONENTS = ("web", "redis", "rabbitmq", "worker", "mariadb")
CELL = 34  # the table's column width
COMPONENT_KEYS = tuple(f"cpu_ms_{comp}_{tag}" for tag in COMPONENT_PHASES.values() for comp in COMPONENTS)


def background(rows: dict[str, list[Phase]], r: int) -> dict[str, float]:
    """Each shared store's CPU seconds per second in round r while no request
    touched it (the quieter of its two floor phases): the other clients of the
    machine's servers, our worker's and beat's idle work."""
    return {k: min(rows["floor"][r].cpu_s[k] / max(1e-9, rows["floor"][r].seconds),
                   rows["gunicorn floor"][r].cpu_s[k] / max(1e-9, rows["gunicorn floor"][r].seconds))
            for k in STORE_KEYS}


def component_table(rows: dict[str, list[Phase]], summary: dict[str, float]) -> None:
    """CPU ms per click by component (web, Redis, RabbitMQ, worker, MariaDB)
    for the sold-out, selling and pay phases: each component's processes'
    utime+stime (threads and reaped children included) over the phase and
    its tail (selling: until every reservation was confirmed in MySQL; pay:
    until every move and give was done), over the requests served. Median
    over the rounds and the spread; the shared stores also net of their
    background (floor phases of the same round). Summary keys
    cpu_ms_<component>_<phase> (raw, as cpu_ms_selling)."""
    comps = COMPONENTS
    say("\n    CPU ms per click by component, median (min - max) over the rounds; net: the shared stores less "
        "their background")
    say("    " + f"{'component':<10}" + "".join(f"{name:>{CELL}}" for name in COMPONENT_PHASES))
    for comp in comps:
        cells = []
        for name, tag in COMPONENT_PHASES.items():
            raw = [p.component_ms(comp) for p in rows[name]]
            m, lo, hi = median_spread(raw)
            summary[f"cpu_ms_{comp}_{tag}"] = m
            cell = f"{m:.3f} ({lo:.2f}-{hi:.2f})"
            if comp in STORE_KEYS:
                net = statistics.median(p.component_ms(comp, background(rows, r)) for r, p in enumerate(rows[name]))
                cell += f" net {net:.3f}"
            cells.append(f"{cell:>{CELL}}")
        say(f"    {comp:<10}" + "".join(cells))
    cells = []
    for name in COMPONENT_PHASES:
        m, lo, hi = median_spread([sum(p.component_ms(k) for k in comps) for p in rows[name]])
        cells.append(f"{f'{m:.3f} ({lo:.2f}-{hi:.2f})':>{CELL}}")
    say(f"    {'all':<10}" + "".join(cells))
    say("    " + f"{'clicks/s':<10}" + "".join(f"{statistics.median(p.rps for p in rows[n]):>{CELL}.0f}"
                                          for n in COMPONENT_PHASES))
    bg = [background(rows, r) for r in range(len(rows["floor"]))]
    say("    the shared stores' background, CPU ms/s by round: " + "; ".join(
        ", ".join(f"{k} {1000 * b[k]:.0f}" for k in STORE_KEYS) for b in bg))
    say("    (caveat: MariaDB on 3306, Redis on 6379 and RabbitMQ on 5672 are the machine's shared servers, used "
        "at the same time by other clients (the test suite, other stacks): their figures count that load too, "
        "which the background and the spread over the interleaved rounds show; redis is this run's Redis "
        "server(s) only, rabbitmq the broker node(s) of CELERY_BROKER_URL only; worker is the Celery worker's and "
        "beat's process trees, web the web tier's; the selling phase counts until its last confirm, pay until "
        "its last give)")
