"""One phase's figures: its rate, latencies and statuses, and the CPU each
component spent per request served (over the phase, and over its tail: the
work it caused after its last answer)."""
from __future__ import annotations

import os
import statistics

CPU_KEYS = ("web", "worker", "mariadb", "redis", "rabbitmq")
# The stores are shared with whatever else runs on the machine (the tests,
# other stacks): in a floor phase no request touches them, so what they use
# then is someone else's (or our worker's and beat's idle work), and
# cpu_ms_selling_net takes that rate off.
STORE_KEYS = ("mariadb", "redis", "rabbitmq")
CORES = os.cpu_count() or 1
# Above this share of the machine the load generator, not the server, sets the pace.
LOADGEN_LIMIT = 0.4


def served_rps(s: dict) -> float:
    """Answers per second, without the refusals (503) and the unanswered (0)."""
    served = s["requests"] - s["by_status"].get(503, 0) - s["by_status"].get(0, 0)
    return served / s["window_s"] if s["window_s"] else 0.0


def median_spread(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


class Phase:
    def __init__(self, name: str, s: dict, cpu: dict[str, float], seconds: float, generator: str,
                 accepted: dict[str, str] | None = None, owned: list[tuple[str, str]] | None = None,
                 last_ok: float | None = None):
        self.name, self.generator = name, generator
        # the order ids of the 202s (-> the SKU each bought), their owners'
        # tokens (None: ask MySQL) and when the last 202 came, for a phase that sells
        self.accepted, self.owned, self.last_ok = accepted, owned, last_ok
        self.p50, self.p99 = s["p50_ms"], s["p99_ms"]
        self.statuses = s["by_status"]
        # Requests the web tier refused (503: its bounded backlog was full) or
        # never answered (0) are not clicks served: the rate and the CPU per
        # request count only the rest, so what a refusal costs is charged to
        # the clicks served.
        self.shed = self.statuses.get(503, 0)
        self.requests = s["requests"] - self.shed - self.statuses.get(0, 0)
        self.rps = served_rps(s)
        n = max(1, self.requests)
        self.cpu_ms = {k: 1000 * cpu[k] / n for k in CPU_KEYS}
        self.cpu_s, self.seconds = cpu, seconds
        # The servers' CPU after the phase's last answer until the work it
        # caused was done (the confirms of its reservations, the gives of its
        # cancels): part of what its clicks cost (component_ms), outside its
        # rate and the figures above.
        self.tail: dict[str, float] = {}
        self.tail_s = 0.0
        # the generator's CPU seconds over the machine's (phase seconds x cores)
        self.loadgen_share = cpu["loadgen"] / max(1e-9, seconds * CORES)

    @property
    def cpu_ms_all(self) -> float:
        return sum(self.cpu_ms.values())

    def stores_per_s(self) -> float:
        """The shared stores' CPU seconds per second in this phase."""
        return sum(self.cpu_s[k] for k in STORE_KEYS) / max(1e-9, self.seconds)

    def cpu_ms_net(self, background_per_s: float) -> float:
        """cpu_ms_all less the shared stores' CPU other clients caused in this
        phase at `background_per_s` (never below what our own servers used)."""
        own = sum(self.cpu_s[k] for k in CPU_KEYS if k not in STORE_KEYS)
        stores = max(0.0, sum(self.cpu_s[k] for k in STORE_KEYS) - background_per_s * self.seconds)
        return 1000 * (own + stores) / max(1, self.requests)

    def add_tail(self, cpu: dict[str, float], seconds: float) -> None:
        self.tail, self.tail_s = cpu, seconds

    def component_ms(self, key: str, background_per_s: dict[str, float] | None = None) -> float:
        """CPU ms of one component per request served, over the phase and its
        tail; with `background_per_s`, less what a shared store spent at that
        rate for other clients over the same time (never below zero)."""
        secs = self.cpu_s[key] + self.tail.get(key, 0.0)
        if background_per_s is not None and key in STORE_KEYS:
            secs = max(0.0, secs - background_per_s[key] * (self.seconds + self.tail_s))
        return 1000 * secs / max(1, self.requests)

    def line(self) -> str:
        cpu = ", ".join(f"{k} {v:.2f}" for k, v in self.cpu_ms.items())
        limit = "  !! load generator is the limit" if self.loadgen_share > LOADGEN_LIMIT else ""
        if self.shed:
            limit += f"  !! {self.shed} refused 503 (the backlog was full)"
        return (f"{self.name:<14} {self.rps:7.0f} req/s  p50 {self.p50:6.1f} ms  p99 {self.p99:6.1f} ms  "
                f"CPU ms/req: {cpu}  {dict(self.statuses)}  [{self.generator}, loadgen CPU "
                f"{self.loadgen_share:.0%} of the machine]{limit}")
