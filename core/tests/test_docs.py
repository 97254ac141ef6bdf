"""The documentation stays true to the tree: every relative link and image
resolves (file and heading), and every source file the pages name exists, so
"How a purchase flows" cannot point at a module that moved, and no link leaves
the repository (a clone has nothing beside it). The changelog is history and
may name what is gone; its links must still resolve."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"```.*?```", re.S)
# A path in the tree: at least one folder, ending in a source file's suffix.
SOURCE = re.compile(r"(?<![\w./-])((?:[\w-]+/)+[\w.-]+\.(?:py|lua|html|js|css|toml|txt|yml|sh))\b")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.M)}


@pytest.mark.parametrize("page", PAGES + [ROOT / "CHANGELOG.md"], ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue  # another site
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.is_relative_to(ROOT):
            broken.append(f"{target} (outside the repository: a clone does not have it)")
        elif not dest.exists() or fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            broken.append(target)
    assert not broken, f"{page.name}: {broken}"


def in_tree(path: str) -> bool:
    """From the top, or inside an app (`lua/authorize.lua` in the accounts section)."""
    return (ROOT / path).exists() or any((app / path).exists() for app in ROOT.iterdir() if app.is_dir())


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_source_file_a_page_names_exists(page):
    text = page.read_text(encoding="utf-8")
    missing = sorted({p for p in SOURCE.findall(text) if not in_tree(p) and not p.startswith("var/")})
    assert not missing, f"{page.name} names files that do not exist: {missing}"


def test_the_front_page_stays_a_front_page():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 200, len(lines)
    text = "\n".join(lines)
    for command in ("bash scripts/up", "bash scripts/test", "bash scripts/bench", "bash scripts/chaos"):
        assert command in text, command
