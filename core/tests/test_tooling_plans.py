"""`bash scripts/bench --plan` and `bash scripts/chaos --plan` say what a run
would do and start nothing (neither Django nor the clusters' runner is even
imported); the plan's summary keys are the summary line's, and both summary
lines keep every key the contract names (keys are only ever added)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
# What a plan must not need: the stores (through Django) or the clusters' nodes.
IMPORTS = ("django", "benchmarks.clusters", "redis", "MySQLdb")


def _plan(package: str, *args: str) -> tuple[str, list[str]]:
    code = (f"import sys; from benchmarks.{package}.__main__ import main; rc = main({list(args)!r}); "
            f"print('IMPORTED', *[m for m in sys.modules if m.split('.')[0] in {IMPORTS!r} "
            f"or m.startswith('benchmarks.clusters')]); sys.exit(rc)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"})
    assert out.returncode == 0, out.stderr
    text, _, imported = out.stdout.rpartition("IMPORTED")
    return text, imported.split()


def test_the_chaos_plan_lists_the_runs_it_would_run_and_starts_nothing():
    from benchmarks.chaos.plan import plan

    for args, cluster, quick in ((["--plan", "--quick"], False, True), (["--plan", "--cluster"], True, False),
                                 (["--plan", "--cluster", "--quick"], True, True)):
        text, imported = _plan("chaos", *args)
        assert imported == [], imported
        lines = text.strip().splitlines()
        runs = plan(None, quick=quick, cluster=cluster)
        assert lines[0].startswith(f"bash scripts/chaos would run {len(runs)} runs")
        assert [line.split(None, 1)[1] for line in lines[1:]] == [" + ".join(run) for run in runs]
    text, _ = _plan("chaos", "--plan", "--only", "worker-kill,web-kill")
    assert text.strip().splitlines()[1:] == ["   1  worker-kill", "   2  web-kill", "   3  worker-kill + web-kill",
                                             "   4  web-kill + worker-kill"]


def test_the_bench_plan_names_its_parts_and_starts_nothing():
    text, imported = _plan("bench", "--plan", "--cluster", "--quick")
    assert imported == [], imported
    assert "2 interleaved rounds of 3 s phases" in text and "[5]" in text and "redis_nodes=" in text
    text, _ = _plan("bench", "--plan", "--skip", "whole,backlog", "--partitions", "1")
    assert "[2]" not in text and "[3]" not in text and "redis_nodes=" not in text


# The keys the contract names (docs/benchmark.md, docs/failures.md): only ever added to.
BENCH_CONTRACT = ("soldout_ratio selling_ratio gate_vs_mysql mysql_per_click confirm_lag_s pay_ratio pay_p99_ratio "
                  "floor_rps floor_ratio drain_rate oversold lost verdict server web_ms_soldout web_ms_selling "
                  "web_ms_pay cpu_ms_selling gunicorn_floor_ratio loadgen_cpu_share redis_nodes hot_node_share "
                  "partitions drain_rate_1 drain_rate_n").split()
CHAOS_CONTRACT = ("runs attempted accepted failed_after_202 failed_after_202_without_redis_loss "
                  "duplicated_after_redis_loss drift lost oversold duplicated pause_s_max pause_s_median redis "
                  "confirm_gap_s_max confirm_gap_s_median broker partitions verdict").split()


class Zeros(dict):
    def __missing__(self, key):
        return 0.0


def test_the_summary_lines_keep_every_key_and_the_plan_names_them(monkeypatch):
    from benchmarks.bench import plan, summary

    monkeypatch.setattr(summary, "_broker_nodes", lambda: 3)
    bench = SimpleNamespace(summary=Zeros(), args=SimpleNamespace(server="granian"), masters=["a", "b", "c"],
                            cluster_url="redis+cluster://x")
    keys = [pair.split("=")[0] for pair in summary.summary_line(bench, "wrk", 0, 0, True).split()]
    assert keys == [*plan.SUMMARY_KEYS, *plan.CLUSTER_KEYS, "broker_nodes", "database", "pay_p99_ms"]
    assert set(BENCH_CONTRACT) <= set(keys)

    from benchmarks.chaos.report import Row, summary as chaos_summary

    line = chaos_summary([Row("worker-kill", pause_s=1.0)], redis_base=7000, broker="cluster:5687", partitions=1)
    assert set(CHAOS_CONTRACT) <= {pair.split("=")[0] for pair in line.split()}
    assert line.endswith("verdict=ok")


def test_the_scripts_plan_before_they_touch_a_server(tmp_path):
    """--plan, --list and --help go straight to the module: the set-up that
    installs and starts servers (ensure_services, which asks MariaDB first)
    never runs. A stand-in `mariadb` on PATH records every call; a stand-in
    virtualenv's python records what it was asked."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "mariadb").write_text('#!/bin/sh\necho "$*" >> "$FAKE/calls"\n')
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text('#!/bin/sh\necho "python $*"\n')
    for tool in (fake / "mariadb", venv / "bin" / "python"):
        tool.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "FAKE": str(tmp_path), "SECKILL_VENV": str(venv)}
    stamp = subprocess.run(["bash", "-c", "source scripts/lib.sh; requirements_stamp"], cwd=ROOT, env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    (venv / ".requirements.sha").write_text(stamp + "\n")
    subprocess.run(["bash", "-c", "source scripts/lib.sh; mariadb_url -e 'SELECT 1'"], cwd=ROOT, env=env, check=True)
    assert (tmp_path / "calls").exists()  # the stand-in is the one the scripts would call
    (tmp_path / "calls").unlink()
    for script, args in (("bench", "--plan --cluster"), ("chaos", "--plan --quick"), ("chaos", "--list"),
                         ("bench", "--help")):
        out = subprocess.run(["bash", f"scripts/{script}", *args.split()], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == f"python -m benchmarks.{script} {args}"
        assert not (tmp_path / "calls").exists(), (script, args)
