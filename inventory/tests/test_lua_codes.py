"""The Lua scripts' return codes and the Python enums that mirror them agree.

Every script of a folder is declared either as answering data or as having
its outcomes mirrored by an enum (`Scripts.returns`). For each enum, the codes
its script can return (the literal `return <n>` / `return {<n>, ...}`, or the
words a state is set to) are exactly the enum's values, and the names its
header gives a code are the enum's names. A script that gains a code, or an
enum that keeps a code the script lost, fails here."""
from __future__ import annotations

import enum
import re

import pytest

from accounts import token_cache
from inventory.redis import keys as redis_keys

FOLDERS = {"inventory": redis_keys._scripts, "accounts": token_cache._scripts}
CODED = [(app, name, cls) for app, scripts in FOLDERS.items() for name, cls in sorted(scripts.codes.items())]

_HEADER = re.compile(r"--\[\[(.*?)\]\]", re.S)
_NUMBER = re.compile(r"\breturn\s*(?:\{\s*)?(-?\d+)\b")
_WORD = re.compile(r"\b\w+\s*=\s*'(\w+)'")
# "1 RELEASED: ..." or "{0, order_id, ...}  OK": a code, then its name in capitals
_NAMED = re.compile(r"^\s*(?:Returns\s+)?(?:\{(-?\d+)[^}\n]*\}|(-?\d+))\s+([A-Z][A-Z_]+)\b", re.M)


def _code(source: str) -> str:
    """The script without its comments (a code named in a comment is not one)."""
    return re.sub(r"--[^\n]*", "", _HEADER.sub("", source))


def numbers_returned(source: str) -> set[int]:
    return {int(n) for n in _NUMBER.findall(_code(source))}


def words_set(source: str) -> set[str]:
    return set(_WORD.findall(_code(source)))


def header_names(source: str) -> dict[int, str]:
    head = _HEADER.search(source)
    return {int(braced or bare): name for braced, bare, name in _NAMED.findall(head.group(1))} if head else {}


def _source(scripts, name: str) -> str:
    return (scripts.folder / f"{name}.lua").read_text()


def test_the_parser_sees_every_literal_answer_and_nothing_in_comments_or_errors():
    lua = """--[[ demo
Returns 1 DONE, 2 BUSY.
  {3, token}  FENCED
]]
if #KEYS ~= 1 then return redis.error_reply('demo: expects 1 key') end
-- return 7 (a comment)
if a then return 1 end
if b then return {2, token} end
if c then return -1 end
state = 'held'
return redis.call('GET', KEYS[1])"""
    assert numbers_returned(lua) == {1, 2, -1}
    assert words_set(lua) == {"held"}
    assert header_names(lua) == {1: "DONE", 3: "FENCED"}  # "2 BUSY" is not at a line's start: not read


@pytest.mark.parametrize("app", sorted(FOLDERS))
def test_every_script_answers_data_or_has_its_enum(app):
    scripts = FOLDERS[app]
    files = {p.stem for p in scripts.folder.glob("*.lua") if not p.name.startswith("_")}
    declared = set(scripts.codes) | set(scripts.answers_data)
    assert files == declared, f"undeclared: {sorted(files - declared)}, no such script: {sorted(declared - files)}"
    assert not set(scripts.codes) & set(scripts.answers_data)


@pytest.mark.parametrize("app,name,cls", CODED, ids=[f"{a}:{n}" for a, n, _ in CODED])
def test_each_enum_holds_exactly_the_codes_its_script_returns(app, name, cls):
    source = _source(FOLDERS[app], name)
    values = {m.value for m in cls}
    if issubclass(cls, str):
        assert words_set(source) == values
    else:
        assert issubclass(cls, enum.IntEnum)
        assert numbers_returned(source) == values, f"{name}.lua returns {sorted(numbers_returned(source))}"
    for code, word in header_names(source).items():
        assert cls(code).name == word, f"{name}.lua calls {code} {word}, {cls.__name__} says {cls(code).name}"


@pytest.mark.parametrize("app", sorted(FOLDERS))
def test_a_script_that_answers_data_has_no_outcomes_to_name(app):
    """At most one constant answer (registry_add's "1"): two distinct literal
    answers are outcomes, and need an enum."""
    scripts = FOLDERS[app]
    for name in sorted(scripts.answers_data):
        assert len(numbers_returned(_source(scripts, name))) <= 1, f"{name}.lua has outcomes: give it an enum"
