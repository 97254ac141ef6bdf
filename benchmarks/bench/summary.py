"""The verdict and the last lines: every check printed, the targets, and the
key=value summary (its keys are only ever added: docs/benchmark.md)."""
from __future__ import annotations

from benchmarks.bench.components import COMPONENT_KEYS
from benchmarks.bench.stack import Bench
from benchmarks.harness import say


def targets(summary: dict[str, float]) -> dict[str, bool]:
    """floor_ratio, selling_ratio and pay_ratio are printed, not targets: against a
    fast server's own floor and baseline they are bounded by our code's CPU,
    which the CPU targets measure directly."""
    return {
        "soldout_ratio>=0.85": summary["soldout_ratio"] >= 0.85,
        "pay_p99_ratio<=2": summary["pay_p99_ratio"] <= 2,
        "gate_vs_mysql>=2": summary.get("gate_vs_mysql", 0) >= 2,
        "mysql_per_click==0": summary["mysql_per_click"] == 0,
        "drain_rate>=5000": summary.get("drain_rate", 0) >= 5000,
        "web_ms_soldout<=0.35": summary["web_ms_soldout"] <= 0.35,
        "web_ms_selling<=0.6": summary["web_ms_selling"] <= 0.6,
        "cpu_ms_selling<=1.1": summary["cpu_ms_selling"] <= 1.1,
        "web_ms_pay<=0.5": summary["web_ms_pay"] <= 0.5,
        "gunicorn_floor_ratio>=0.7": summary["gunicorn_floor_ratio"] >= 0.7,
    }


def summary_line(bench: Bench, generators: str, oversold: int, lost: int, ok: bool) -> str:
    s = bench.summary
    return (
        f"soldout_ratio={s['soldout_ratio']:.2f} selling_ratio={s['selling_ratio']:.2f} "
        f"gate_vs_mysql={s.get('gate_vs_mysql', 0):.2f} mysql_per_click={s['mysql_per_click']:.3f} "
        f"confirm_lag_s={s['confirm_lag_s']:.2f} pay_ratio={s['pay_ratio']:.2f} "
        f"pay_p99_ratio={s['pay_p99_ratio']:.2f} floor_rps={s['floor_rps']:.0f} "
        f"floor_ratio={s['floor_ratio']:.2f} drain_rate={s.get('drain_rate', 0):.0f} "
        f"oversold={oversold} lost={lost} verdict={'ok' if ok else 'FAIL'} "
        f"server={bench.args.server} loadgen_cpu_share={s['loadgen_cpu_share']:.2f} "
        f"web_ms_soldout={s['web_ms_soldout']:.2f} web_ms_selling={s['web_ms_selling']:.2f} "
        f"web_ms_pay={s['web_ms_pay']:.2f} cpu_ms_selling={s['cpu_ms_selling']:.2f} "
        f"cpu_ms_selling_net={s['cpu_ms_selling_net']:.2f} "
        f"gunicorn_floor_ratio={s['gunicorn_floor_ratio']:.2f} "
        f"gunicorn_floor_rps={s['gunicorn_floor_rps']:.0f} generator={generators} shed={s['shed']:.0f} "
        f"partitions={s.get('partitions', 1):.0f} drain_rate_1={s.get('drain_rate_1', 0):.0f} "
        f"drain_rate_n={s.get('drain_rate_n', 0):.0f} drain_rate_n1={s.get('drain_rate_n1', 0):.0f} "
        f"drain_rate_n2={s.get('drain_rate_n2', 0):.0f} "
        + " ".join(f"{k}={s[k]:.3f}" for k in COMPONENT_KEYS)
        + (f" redis_nodes={len(bench.masters)} hot_node_share={s.get('hot_node_share', 0):.2f}"
           if bench.cluster_url else "")
        + f" broker_nodes={_broker_nodes()}"
        + f" database={_database()} pay_p99_ms={s.get('pay_p99_ms', 0):.1f}"
        + "".join(f" {k}={v}" for k, v in s.items() if k.startswith("db_commit_"))
    )


def _database() -> str:
    """single:<port>, or galera:<base> when DATABASE_URL names the local Galera cluster's front (--cluster)."""
    from django.db import connection

    from benchmarks.bench.options import galera_base

    port = int(connection.settings_dict.get("PORT") or 3306)
    return f"galera:{galera_base()}" if port == galera_base() + 3 else f"single:{port}"


def _broker_nodes() -> int:
    from core.broker import broker_urls

    return len(broker_urls())


def verdict(bench: Bench, generators: str) -> bool:
    """Every check printed, the targets, then the summary's two lines, the
    key=value summary last. ok only when every SKU's check holds."""
    for ch in bench.checks:
        say("    " + " ".join(f"{k}={v}" for k, v in ch.items()))
    oversold = sum(ch["oversold"] for ch in bench.checks)
    lost = sum(ch["lost"] for ch in bench.checks)
    ok = all(ch["ok"] for ch in bench.checks) and oversold == 0 and lost == 0
    say("    targets: " + ", ".join(f"{k} {'met' if v else 'MISSED'}" for k, v in targets(bench.summary).items()))
    s = bench.summary
    say(f"\nbaseline_rps={s['baseline_rps']:.0f} soldout_p99_ratio={s['soldout_p99_ratio']:.2f} "
        f"rounds={bench.sizes.rounds}")
    say(summary_line(bench, generators, oversold, lost, ok))
    return ok
