"""Comments and messages that send a reader to the documentation, `(docs/<page>.md,
"<heading>")`, name a page and a heading that exist: the README is a front page now,
so a pointer to one of its old sections is a dead end. Pure file reads."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIP = {".venv", "var", ".git", "node_modules", "migrations"}
POINTER = re.compile(r"""\((docs/[\w-]+\.md|README(?:\.md)?),\s*["']([^"']+)["']\)""")


def sources() -> list[Path]:
    named = {"Dockerfile", "up", "test", "bench", "chaos", "cluster", "lib.sh"}
    return [p for p in ROOT.rglob("*") if p.is_file() and (p.suffix in (".py", ".html", ".js", ".yml", ".toml")
                                                           or p.name in named)
            and not SKIP & set(p.relative_to(ROOT).parts)]


def headings(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return [" ".join(h.split()).lower() for h in re.findall(r"^#+\s+(.*)$", text, re.M)]


def test_every_pointer_to_the_docs_names_a_heading_of_its_page():
    dead = []
    for path in sources():
        text = path.read_text(encoding="utf-8", errors="replace")
        for m in POINTER.finditer(text):
            page, wanted = ROOT / m.group(1), " ".join(m.group(2).split()).lower()
            if m.group(1).startswith("README") or not page.exists() or not any(wanted in h for h in headings(page)):
                dead.append(f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}")
    assert not dead, "pointers to sections that are not there:\n" + "\n".join(dead)
