"""The tooling keeps the rooms the app has: every module of benchmarks/ and
every script under scripts/ under 600 lines, no function in benchmarks/ over
60 (decorators included). Pure file reads."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULE_LINES = 600
FUNCTION_LINES = 60


def test_every_benchmark_module_and_script_is_under_600_lines():
    files = sorted((ROOT / "benchmarks").rglob("*.py")) + sorted(p for p in (ROOT / "scripts").iterdir() if p.is_file())
    assert len(files) > 20, files  # the walk sees the tree
    too_long = {str(p.relative_to(ROOT)): n for p in files
                if (n := len(p.read_text(encoding="utf-8").splitlines())) >= MODULE_LINES}
    assert not too_long, f"split these by concept (at most {MODULE_LINES - 1} lines): {too_long}"


def test_no_benchmark_function_is_over_60_lines():
    too_long = []
    for path in sorted((ROOT / "benchmarks").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if node.end_lineno - first + 1 > FUNCTION_LINES:
                    too_long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} "
                                    f"({node.end_lineno - first + 1} lines)")
    assert not too_long, f"over {FUNCTION_LINES} lines: {too_long}"
