"""The measured figures the documentation quotes, kept in one place.

docs/results.md holds the summary line (the last `key=value` line, the one with
`verdict=`) of the last recorded run of each benchmark and fault-matrix command.
A page quotes a figure as a link to its run, for example
[`drain_rate_1=4853`](results.md#bench), and core/tests/test_docs_standalone.py
fails when a quote differs from the line it names. Recording a run rewrites its
section and every quote of it in README.md and docs/*.md:

    bash scripts/bench | tee var/bench.txt
    .venv/bin/python -m benchmarks.figures bench var/bench.txt

(or the output on stdin). The run names are those of RUNS below.
"""
from __future__ import annotations

import argparse
import datetime
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results.md"

# Each run recorded, by its section's name, and the command that prints its line.
RUNS = {
    "bench": "bash scripts/bench",
    "bench-cluster": "bash scripts/bench --cluster",
    "bench-lua": "bash scripts/bench --lua",
    "chaos": "bash scripts/chaos",
    "chaos-quick": "bash scripts/chaos --quick",
    "chaos-cluster": "bash scripts/chaos --cluster",
    "chaos-cluster-quick": "bash scripts/chaos --cluster --quick",
    "chaos-hosts-quick": "bash scripts/chaos --cluster --hosts --quick",
    "chaos-cluster-database": ("bash scripts/chaos --cluster --quick --only mariadb-node-kill,mariadb-node-pause,"
                               "mariadb-node-restart,mariadb-crash-all,redis-master-kill,rabbitmq-node-kill"),
}

PAIR = re.compile(r"([a-z][a-z0-9_]*)=(\S+)")
SECTION = re.compile(r"^## ([a-z0-9-]+)\n(.*?)(?=^## |\Z)", re.M | re.S)
BLOCK = re.compile(r"^```summary\n(.*?)^```\n", re.M | re.S)
QUOTE = re.compile(r"\[`(?P<text>[a-z][a-z0-9_]*=[^`\s]+(?: [a-z][a-z0-9_]*=[^`\s]+)*)`\]"
                   r"\((?P<path>(?:docs/)?results\.md)#(?P<run>[a-z0-9-]+)\)")


@dataclass
class Quote:
    run: str
    text: str
    pairs: dict[str, str]


def pairs_of(text: str) -> dict[str, str]:
    return dict(PAIR.findall(text))


def runs(results: str) -> dict[str, dict[str, str]]:
    """Each section's summary pairs, by run name."""
    out = {}
    for name, body in SECTION.findall(results):
        block = BLOCK.search(body)
        if block:
            out[name] = pairs_of(block.group(1))
    return out


def quotes(page: str) -> list[Quote]:
    return [Quote(m["run"], m["text"], pairs_of(m["text"])) for m in QUOTE.finditer(page)]


def summary_line(output: str) -> dict[str, str]:
    """The last line of a run's output that carries a verdict, as pairs; every
    word of it must be a pair, so a line cut or mixed with other output fails."""
    for line in reversed(output.splitlines()):
        if "verdict=" in line:
            words = line.split()
            if not words or any(not PAIR.fullmatch(w) for w in words):
                raise SystemExit(f"not a summary line of key=value pairs: {line[:120]!r}")
            return dict(PAIR.fullmatch(w).groups() for w in words)
    raise SystemExit("no summary line (a line with verdict=) in the output")


def section(run: str, pairs: dict[str, str], when: str, commit: str, note: str = "") -> str:
    line = " ".join(f"{k}={v}" for k, v in pairs.items())
    wrapped = "\n".join(textwrap.wrap(line, 100, break_long_words=False, break_on_hyphens=False))
    head = f"`{RUNS[run]}`, recorded {when} on commit {commit}."
    return f"## {run}\n\n{head}{' ' + note if note else ''}\n\n```summary\n{wrapped}\n```\n\n"


def _requote(page: str, run: str, pairs: dict[str, str]) -> tuple[str, list[str]]:
    """The page with every quote of `run` given the new values; the keys the new line lacks."""
    missing = []

    def one(m: re.Match) -> str:
        if m["run"] != run:
            return m.group(0)
        new = []
        for k, v in pairs_of(m["text"]).items():
            if k not in pairs:
                missing.append(k)
            new.append(f"{k}={pairs.get(k, v)}")
        return f"[`{' '.join(new)}`]({m['path']}#{run})"

    return QUOTE.sub(one, page), missing


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def record(run: str, output: str, *, results: Path = RESULTS, pages: list[Path] | None = None,
           when: str | None = None, commit: str | None = None, note: str = "") -> list[str]:
    """Writes the run's summary line into `results` and its values into every
    quote of it; returns what changed. SystemExit when the output has no
    summary line, or a quote names a key the new line lacks (left as it was)."""
    if run not in RUNS:
        raise SystemExit(f"unknown run {run!r}: one of {', '.join(RUNS)}")
    pairs = summary_line(output)
    when = when or datetime.datetime.now(datetime.UTC).date().isoformat()
    new = section(run, pairs, when, commit or _commit(), note)
    text = results.read_text(encoding="utf-8")
    old = next((m for m in SECTION.finditer(text) if m.group(1) == run), None)
    text = text[:old.start()] + new + text[old.end():] if old else text.rstrip("\n") + "\n\n" + new
    results.write_text(text.rstrip("\n") + "\n", encoding="utf-8")
    changed, stale = [str(results)], []
    for page in pages if pages is not None else [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        before = page.read_text(encoding="utf-8")
        after, missing = _requote(before, run, pairs)
        stale += [f"{page.name}: {k}" for k in missing]
        if after != before:
            page.write_text(after, encoding="utf-8")
            changed.append(str(page))
    if stale:
        raise SystemExit("quoted keys the new line does not have (edit those quotes): " + ", ".join(stale))
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Record a run's summary line in docs/results.md and refresh "
                                             "every quote of it.")
    ap.add_argument("run", choices=list(RUNS))
    ap.add_argument("output", nargs="?", help="the run's output (a file; stdin when left out)")
    ap.add_argument("--note", default="", help="a sentence about the run (machine, load), kept beside its line")
    args = ap.parse_args(argv)
    output = Path(args.output).read_text(encoding="utf-8") if args.output else sys.stdin.read()
    for path in record(args.run, output, note=args.note):
        print("updated", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
