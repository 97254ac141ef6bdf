"""The app keeps its rooms (issue 27's bound): no module of core, accounts,
inventory, orders, reconciliation or seckill_site over 400 lines, and no
function or method over 60 (decorators included). Tests and migrations are
not rooms a reader walks through, so they are left out. Pure file reads."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ("core", "accounts", "inventory", "orders", "reconciliation", "seckill_site")
MODULE_LINES = 400
FUNCTION_LINES = 60


def app_modules() -> list[Path]:
    return [p for app in APPS for p in sorted((ROOT / app).rglob("*.py"))
            if not {"tests", "migrations"} & set(p.relative_to(ROOT).parts)]


def test_the_walk_sees_every_app():
    seen = {p.relative_to(ROOT).parts[0] for p in app_modules()}
    assert seen == set(APPS) and len(app_modules()) > 100


def test_no_app_module_is_over_400_lines():
    too_long = {str(p.relative_to(ROOT)): n for p in app_modules()
                if (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_LINES}
    assert not too_long, f"split these by concept (at most {MODULE_LINES} lines): {too_long}"


def test_no_app_function_is_over_60_lines():
    too_long = []
    for path in app_modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if (n := node.end_lineno - first + 1) > FUNCTION_LINES:
                    too_long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert not too_long, f"over {FUNCTION_LINES} lines: {too_long}"
