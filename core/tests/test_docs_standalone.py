"""The documentation stands on its own and agrees with the code: nothing in the
tree points at a file outside it, every environment variable the code reads is
in docs/configuration.md (and every one that page names is read), and every
measured figure a page quotes is the one docs/results.md holds. Pure file reads
(and one bash call for scripts/test's marker expression)."""
from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

from benchmarks import figures

ROOT = Path(__file__).resolve().parents[2]
SKIP = {".venv", "var", ".git", "node_modules", "__pycache__", "staticfiles"}
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = ["up", "test", "bench", "chaos", "cluster", "cluster.sh", "lib.sh", "haproxy-config",
         "compose-redis-cluster"]
COMPOSE = ["docker-compose.yml", "docker-compose.cluster.yml"]


def tracked_text() -> list[Path]:
    """Every file a reader may open: pages, code and its comments, scripts, configuration."""
    suffixes = {".md", ".py", ".lua", ".html", ".js", ".css", ".yml", ".toml", ".ini", ".in", ".conf", ".txt",
                ".sh", ".http"}
    named = {"Dockerfile", ".gitignore", ".dockerignore", *SHELL}
    return [p for p in ROOT.rglob("*") if p.is_file() and (p.suffix in suffixes or p.name in named)
            and not SKIP & set(p.relative_to(ROOT).parts) and p != Path(__file__)]


# --- nothing points outside the tree -------------------------------------------------------

# The reference texts a first version of the project was written against sat beside
# the checkout; a clone has neither, so no page or comment may send a reader there.
OUTSIDE = re.compile(r"\.\./shared\b|\bshared/(?:API|DESIGN)|\b(?:API|DESIGN)\.md\b")


def test_no_page_or_comment_names_a_file_outside_the_repository():
    found = []
    for path in tracked_text():
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert not found, "say it in the project's own words instead:\n" + "\n".join(found)


# --- every variable the code reads is documented -------------------------------------------

ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]{2,}")
ENV_METHODS = {"get", "setdefault", "pop"}


def _is_os_environ(node: ast.AST) -> bool:
    return ast.unparse(node) == "os.environ"  # a bare `environ` is a WSGI request's


def _env_call_name(call: ast.Call, helpers: set[str]) -> str | None:
    """The variable a call reads when it reads one by a literal name."""
    if not call.args or not isinstance(call.args[0], ast.Constant) or not isinstance(call.args[0].value, str):
        return None
    f = call.func
    if isinstance(f, ast.Attribute) and f.attr in ENV_METHODS and _is_os_environ(f.value):
        return call.args[0].value
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    return call.args[0].value if name == "getenv" or name in helpers else None


def _helpers(tree: ast.AST) -> set[str]:
    """Functions that read the variable named by one of their parameters
    (`env_int(name, default)`, webserver's `_int`), so their callers are readers."""
    found = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef):
            params = {a.arg for a in fn.args.args}
            for node in ast.walk(fn):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in ENV_METHODS | {"getenv"} and node.args
                        and isinstance(node.args[0], ast.Name) and node.args[0].id in params):
                    found.add(fn.name)
    return found


def python_sources() -> list[Path]:
    """The app, the settings, the scripts' Python and the benchmarks; not the tests
    (their variables steer the suite: docs/testing.md)."""
    return [p for p in ROOT.rglob("*.py") if not SKIP & set(p.relative_to(ROOT).parts)
            and "tests" not in p.relative_to(ROOT).parts and p.relative_to(ROOT).parts[0] != "testsupport"]


def python_reads() -> dict[str, set[str]]:
    trees = {p: ast.parse(p.read_text(encoding="utf-8")) for p in python_sources()}
    helpers = set().union(*(_helpers(t) for t in trees.values()))
    reads: dict[str, set[str]] = {}
    for path, tree in trees.items():
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Call):
                name = _env_call_name(node, helpers)
            elif (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_os_environ(node.value)
                  and isinstance(node.slice, ast.Constant)):
                name = node.slice.value
            elif (isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant)
                  and any(_is_os_environ(c) for c in node.comparators)):
                name = node.left.value
            if isinstance(name, str) and ENV_NAME.fullmatch(name):
                reads.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return reads


# `${NAME:-default}`, `${NAME-default}`, `${NAME:?message}`, `${NAME:=x}`: a variable the
# script takes from its caller (its own variables are plain `$NAME`).
SHELL_INPUT = re.compile(r"(?<!\$)\$\{([A-Z][A-Z0-9_]+):?[-?=]")
# Compose fills `${NAME}` in from the environment it runs in; `$$NAME` is the container's.
COMPOSE_INPUT = re.compile(r"(?<!\$)\$\{([A-Z][A-Z0-9_]+)")


def file_reads() -> dict[str, set[str]]:
    reads: dict[str, set[str]] = {}
    for rel, pattern in [*((f"scripts/{s}", SHELL_INPUT) for s in SHELL), *((c, COMPOSE_INPUT) for c in COMPOSE)]:
        text = (ROOT / rel).read_text(encoding="utf-8")
        for name in pattern.findall(text):
            reads.setdefault(name, set()).add(rel)
    return reads


def variables_read() -> dict[str, set[str]]:
    reads = python_reads()
    for name, where in file_reads().items():
        reads.setdefault(name, set()).update(where)
    return reads


def documented() -> set[str]:
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    return set(re.findall(r"`([A-Z][A-Z0-9_]{2,})`", text))


def test_the_scan_finds_the_readers_it_must():
    """A scan that found nothing would pass the test below: these are read through
    each way the code has (os.environ.get, a settings helper, webserver's own helper,
    a script's default, compose's interpolation)."""
    reads = variables_read()
    for name in ("SECKILL_SOLD_OUT_MEMO_SECONDS", "SECKILL_WORKER_PREFETCH", "DJANGO_SECURE_HSTS_SECONDS",
                 "SECKILL_WEB_PROBE_SLOTS", "SECKILL_TEST_LEGS", "SECKILL_PROXY_WEBS", "SECKILL_REDIS_CLUSTER_NET"):
        assert name in reads, name


def test_every_variable_the_code_reads_is_in_the_configuration_page():
    missing = {name: sorted(where) for name, where in variables_read().items() if name not in documented()}
    assert not missing, "read by the code, not in docs/configuration.md:\n" + "\n".join(
        f"{name} ({', '.join(where)})" for name, where in sorted(missing.items()))


def test_every_variable_the_configuration_page_names_is_read():
    """The other way round: a variable the page lists that nothing reads is a
    page that disagrees with the code (the tests' own variables count as read)."""
    code = "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in tracked_text()
                     if p.suffix != ".md" and p.name != "CHANGELOG.md")
    unread = sorted(n for n in documented() if n.startswith(("SECKILL_", "DJANGO_", "GUNICORN_"))
                    and not re.search(rf"\b{n}\b", code))
    assert not unread, f"docs/configuration.md names variables nothing reads: {unread}"


# --- quoted figures are the measured ones --------------------------------------------------

def test_the_results_page_holds_a_summary_of_each_run_it_names():
    runs = figures.runs(figures.RESULTS.read_text(encoding="utf-8"))
    assert {"bench", "bench-lua", "chaos", "chaos-quick", "chaos-cluster-quick"} <= set(runs), sorted(runs)
    for run, pairs in runs.items():
        assert run in figures.RUNS and pairs, run
        assert pairs.get("verdict", "ok") in ("ok", "FAIL"), run
        assert not run.startswith("chaos") or "verdict" in pairs, run


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_figure_a_page_quotes_is_the_one_of_its_run(page):
    runs = figures.runs(figures.RESULTS.read_text(encoding="utf-8"))
    wrong = []
    for quote in figures.quotes(page.read_text(encoding="utf-8")):
        source = runs.get(quote.run)
        if source is None:
            wrong.append(f"{quote.text}: no run {quote.run!r} in docs/results.md")
            continue
        wrong += [f"{quote.text}: {quote.run} has {k}={source.get(k)}" for k, v in quote.pairs.items()
                  if source.get(k) != v]
    assert not wrong, f"{page.name} (python -m benchmarks.figures refreshes the quotes):\n" + "\n".join(wrong)


# A measured rate, a run count or a pause, as prose states one.
MEASURED = re.compile(r"\d[\d ,.]*\s?(?:orders/s|req/s|ops/s|confirms a second)|\b\d+ runs\b"
                      r"|\bpause[sd]? (?:of )?(?:about )?\d")


def test_the_front_page_states_measured_figures_only_as_quotes():
    """The README is what a newcomer trusts: each figure on it that a run measured
    is a quote of docs/results.md, so the two cannot drift apart."""
    text = figures.QUOTE.sub("", (ROOT / "README.md").read_text(encoding="utf-8"))
    stray = [m.group(0) for m in MEASURED.finditer(text)]
    assert not stray, f"README.md: measured figures outside a quote of docs/results.md: {stray}"


def test_refreshing_a_run_rewrites_its_section_and_every_quote(tmp_path):
    results = tmp_path / "results.md"
    results.write_text(figures.RESULTS.read_text(encoding="utf-8"), encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text("Drain [`drain_rate_1=1 partitions=3`](results.md#bench), pause "
                    "[`pause_s_max=1.0`](results.md#chaos-quick).\n", encoding="utf-8")
    output = "phase lines\nruns=2 verdict=ok\nsoldout_ratio=0.9 partitions=3 drain_rate_1=4321 verdict=ok\n"
    figures.record("bench", output, results=results, pages=[page], when="2027-01-01", commit="abc1234")
    runs = figures.runs(results.read_text(encoding="utf-8"))
    assert runs["bench"] == {"soldout_ratio": "0.9", "partitions": "3", "drain_rate_1": "4321", "verdict": "ok"}
    assert "2027-01-01" in results.read_text(encoding="utf-8")
    assert page.read_text(encoding="utf-8") == ("Drain [`drain_rate_1=4321 partitions=3`](results.md#bench), "
                                               "pause [`pause_s_max=1.0`](results.md#chaos-quick).\n")
    with pytest.raises(SystemExit):
        figures.record("bench", "no summary here\n", results=results, pages=[page])


# --- small things the pages promise --------------------------------------------------------

def test_a_dot_env_file_is_never_committed():
    """docs/operations.md suggests a .env beside the compose file: it holds the secrets."""
    for name in (".env", ".env.production"):
        ignored = subprocess.run(["git", "check-ignore", "-q", name], cwd=ROOT)
        if ignored.returncode == 128:
            pytest.skip("not a git checkout")
        assert ignored.returncode == 0, f"{name} is not in .gitignore"


def _cluster_leg_args(*args: str) -> list[str]:
    """scripts/test's own function, run alone: the pytest arguments of the cluster leg."""
    text = (ROOT / "scripts" / "test").read_text(encoding="utf-8")
    fn = re.search(r"^cluster_leg_args\(\) \{.*?^\}", text, re.M | re.S)
    assert fn, "scripts/test has no cluster_leg_args"
    out = subprocess.run(["bash", "-euo", "pipefail", "-c",
                          fn.group(0) + '\ncluster_leg_args "$@"; printf "%s\\0" "${CLUSTER_LEG_ARGS[@]}"',
                          "test", *args], capture_output=True, check=True)
    return out.stdout.decode().split("\0")[:-1]


def test_a_marker_expression_given_to_scripts_test_narrows_the_cluster_leg():
    """pytest keeps only the last -m: passed after the leg's own, `-m "not browser"`
    ran nearly the whole suite on the cluster leg."""
    own = "redis_both or redis_cluster or broker_cluster or mariadb_both or mariadb_cluster"
    assert _cluster_leg_args() == ["-m", own]
    assert _cluster_leg_args("-x", "-m", "not browser", "core/tests") == [
        "-m", f"({own}) and (not browser)", "-x", "core/tests"]
    assert _cluster_leg_args("-mworker", "-k", "sale") == ["-m", f"({own}) and (worker)", "-k", "sale"]
