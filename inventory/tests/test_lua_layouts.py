"""Every Lua script's layout (core.lua_layout) agrees with the script, and
every call goes through a layout.

For each folder of scripts in the project: every script has exactly one
layout and every layout a script; each layout names the positions its
header names, in the same order; its builder makes what the script's
`#KEYS`/`#ARGV` guard accepts, and one key or argument more or fewer is
refused by the guard. A layout with two names swapped fails here (checked
below for every layout), and so does an app module that calls a script with
a list of its own."""
from __future__ import annotations

import ast
import copy
from pathlib import Path

import pytest

from accounts import token_cache
from core.lua_layout import Layout, Many, declared, header_positions, mismatches
from inventory.redis import keys as redis_keys
from testsupport import ROOT

# The folders of scripts: each app's lua/ that holds a script (core/lua holds only the shared _lib.lua).
FOLDERS = sorted({p.parent for p in ROOT.glob("*/lua/*.lua") if not p.name.startswith("_")})
LAYOUTS = sorted((layout for folder in FOLDERS for layout in declared().get(folder, {}).values()),
                 key=lambda layout: (str(layout.scripts.folder), layout.name))
IDS = [f"{layout.scripts.folder.parent.name}:{layout.name}" for layout in LAYOUTS]


def _source(layout: Layout) -> str:
    return (layout.scripts.folder / f"{layout.name}.lua").read_text()


def test_the_folders_are_the_apps_own():
    assert {redis_keys.LUA_DIR, token_cache._scripts.folder} == set(FOLDERS)
    assert not {f for f in declared() if ROOT in f.parents} - set(FOLDERS)


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.parent.name for f in FOLDERS])
def test_every_script_has_one_layout_and_every_layout_a_script(folder: Path):
    files = {p.stem for p in folder.glob("*.lua") if not p.name.startswith("_")}
    layouts = set(declared().get(folder, {}))
    assert files == layouts, f"no layout: {sorted(files - layouts)}, no script: {sorted(layouts - files)}"


@pytest.mark.parametrize("layout", LAYOUTS, ids=IDS)
def test_each_layout_agrees_with_its_header_and_guard(layout: Layout):
    assert mismatches(layout, _source(layout)) == []


def _altered(layout: Layout, **changes) -> Layout:
    clone = copy.copy(layout)
    vars(clone).update(changes)
    return clone


def _swap(items: tuple, i: int, j: int) -> tuple:
    out = list(items)
    out[i], out[j] = out[j], out[i]
    return tuple(out)


@pytest.mark.parametrize("layout", LAYOUTS, ids=IDS)
def test_a_layout_with_two_names_swapped_or_one_missing_fails(layout: Layout):
    source = _source(layout)
    if len(layout.keys) > 1:
        assert mismatches(_altered(layout, keys=_swap(layout.keys, 0, -1)), source)
    fixed = [i for i, a in enumerate(layout.argv) if not isinstance(a, Many)]
    if len(fixed) > 1:
        assert mismatches(_altered(layout, argv=_swap(layout.argv, fixed[0], fixed[-1])), source)
    assert mismatches(_altered(layout, keys=layout.keys[:-1]), source)
    assert mismatches(_altered(layout, keys=(*layout.keys, "extra")), source)
    if fixed:
        assert mismatches(_altered(layout, argv=layout.argv[1:]), source)


def test_every_header_names_its_positions_in_the_one_form():
    for layout in LAYOUTS:
        assert header_positions(_source(layout)), layout.name
    assert header_positions("--[[ x\nKEYS[1] stock: hash  ARGV[1] id\nARGV[2..] ids\nARGV[..] more\n]]") == [
        ("KEYS", "1", "stock"), ("ARGV", "1", "id"), ("ARGV", "2..", "ids"), ("ARGV", "..", "more")]
    with pytest.raises(ValueError, match="is not `KEYS"):
        header_positions("--[[ x\nKEYS[1] <prefix>:{<sku>}:stock\n]]\nreturn 1")
    with pytest.raises(ValueError, match="is not `KEYS"):
        header_positions("--[[ x\nKEYS[1..2] stage\n]]\nreturn 1")
    with pytest.raises(ValueError, match="is not `ARGV"):
        header_positions("--[[ x\nrecorded in ARGV[2], which\n]]\nreturn 1")


# --- No call site builds a list of keys or arguments --------------------------------------

SCANNED = ("core", "accounts", "inventory", "orders", "reconciliation", "seckill_site", "benchmarks")
# The loader (core.redis.scripts), the call a layout builds (core.redis.calls) and the layouts themselves.
OWNERS = {ROOT / "core" / "redis" / "scripts.py", ROOT / "core" / "redis" / "calls.py", ROOT / "core" / "lua_layout.py"}
RAW_CALLS = {"evalsha", "eval", "register_script", "fcall"}


def _app_modules():
    for app in SCANNED:
        for path in sorted((ROOT / app).rglob("*.py")):
            if path not in OWNERS and not {"tests", "migrations"} & set(path.relative_to(ROOT).parts):
                yield path


def script_calls_by_hand(source: str) -> list[str]:
    """What in a module calls a script other than through a layout's builder:
    a Call made by hand, a raw EVAL/EVALSHA, a layout's script called itself,
    or a Scripts object used for anything but declaring layouts."""
    tree = ast.parse(source)
    scripts = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
               and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "Scripts"
               for t in node.targets if isinstance(t, ast.Name)}
    declaring = {id(node.args[0]) for node in ast.walk(tree) if isinstance(node, ast.Call)
                 and getattr(node.func, "id", "") == "Layout" and node.args}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in {"Call", "GuardedScript"} | RAW_CALLS or name == "script":
                found.append(f"line {node.lineno}: {ast.unparse(func)}(...)")
        elif isinstance(node, ast.Name) and node.id in scripts and isinstance(node.ctx, ast.Load) \
                and id(node) not in declaring:
            found.append(f"line {node.lineno}: {node.id} used but to declare a layout")
    return found


def test_no_module_calls_a_script_but_through_its_layout():
    found = [f"{path.relative_to(ROOT)}: {what}" for path in _app_modules()
             for what in script_calls_by_hand(path.read_text())]
    assert not found, "\n".join(found)


def test_the_scan_sees_a_call_by_hand():
    assert script_calls_by_hand("_s = Scripts(d)\nX = Layout(_s, 'x', keys=(), answers=DATA)\n") == []
    assert len(script_calls_by_hand("_s = Scripts(d)\n_s.get('undo')(keys=[a, b], args=[c])\n")) == 1
    assert len(script_calls_by_hand("Call(UNDO_LUA.script, [b, a], [c])\n")) == 1
    assert len(script_calls_by_hand("UNDO_LUA.script(keys=[b, a], args=[c])\n")) == 1
    assert len(script_calls_by_hand("redis().evalsha(sha, 2, b, a)\n")) == 1
