"""The code's names follow the glossary (docs/architecture.md, "Glossary"):
the words it retired are used by no app module, and every name the glossary
points at exists."""
from __future__ import annotations

import re
from pathlib import Path

from django.conf import settings

ROOT = Path(settings.BASE_DIR)
APPS = ("core", "accounts", "inventory", "orders", "reconciliation", "seckill_site")
GLOSSARY = ROOT / "docs" / "architecture.md"

# Each retired spelling, and the word that replaced it.
RETIRED = {
    r"\bReleaseOutcome\b": "UndoOutcome",
    r"\bOutcome\.(REFUSED|FAILED|RELEASED)\b": "Outcome.DROPPED / RETURNED / UNDONE",
    r"\bHold\.RELEASED\b": "Hold.UNDONE",
    r"\bgate\.release\(": "gate.undo(",
    r"\breservation_release_record\b": "reservation_undo_record",
    r"\bsettle_(failed|given_back)\b": "settle_dropped / settle_returned",
    r"\b(failed_before|UNIT_KEPT_BY_REDIS)\b": "dropped_before / DROPPING_REFUSALS",
    r"\b(CLAIM|RELEASE)_LUA\b": 'the scripts "hold" and "undo" (HOLD_LUA, UNDO_LUA)',
    r"\bk\.(claims|released)\b": "k.holds / k.undone",
    r"\bstock_moves_apply\([^)]*released=": "given_back=",
}


def _app_sources():
    for app in APPS:
        for path in (ROOT / app).rglob("*"):
            if path.suffix not in (".py", ".lua") or "tests" in path.parts or "migrations" in path.parts:
                continue
            yield path


def test_no_app_module_uses_a_retired_word():
    found = []
    for path in _app_sources():
        text = path.read_text()
        for pattern, instead in RETIRED.items():
            for m in re.finditer(pattern, text):
                line = text.count("\n", 0, m.start()) + 1
                found.append(f"{path.relative_to(ROOT)}:{line}: {m.group(0)!r} (use {instead})")
    assert not found, "\n".join(found)


def test_the_lua_scripts_are_named_by_the_glossary():
    names = {p.stem for p in (ROOT / "inventory" / "lua").glob("*.lua")}
    assert {"hold", "undo", "settle", "reserve", "give"} <= names
    assert not {"claim", "release"} & names


def test_every_name_the_glossary_points_at_exists_in_the_code():
    text = GLOSSARY.read_text()
    table = text.split("## Glossary", 1)[1].split("\n## ", 1)[0]
    code = "\n".join(p.read_text() for p in _app_sources())
    lua = {p.name for p in ROOT.rglob("*.lua") if ".venv" not in p.parts}
    missing = []
    for row in table.splitlines():
        if not row.startswith("| ") or row.startswith(("| word", "| ---")):
            continue
        names = re.findall(r"`([^`]+)`", row.rsplit("|", 2)[-2])
        for name in names:
            bare = re.sub(r"\(.*", "", name).split(".")[-1].strip()
            if name.endswith(".lua"):
                ok = name in lua
            elif name.startswith(("seckill:", "{")):
                ok = True  # a stored key name, spelled in the keys module
            else:
                ok = re.search(rf"\b{re.escape(bare)}\b", code) is not None
            if not ok:
                missing.append(name)
    assert not missing, missing
