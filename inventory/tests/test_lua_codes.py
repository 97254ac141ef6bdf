"""The Lua scripts' return codes and the Python enums that mirror them agree.

Every script's layout (core.lua_layout) says what it answers: data, codes
mirrored by an enum, or codes no caller branches on, named by its header
alone. For each enum, the codes its script can return (the literal `return
<n>` / `return {<n>, ...}`, or the words a state is set to) are exactly the
enum's values, and the names its header gives a code are the enum's names. A
script that gains a code, or an enum that keeps a code the script lost, fails
here; so does a script whose header names other codes than it returns. That
every script has a layout is inventory/tests/test_lua_layouts.py's."""
from __future__ import annotations

import enum
import re

import pytest

from core.lua_layout import CODES_IN_HEADER, DATA
from inventory.tests.test_lua_layouts import LAYOUTS

CODED = [(layout.name, layout.answers) for layout in LAYOUTS if isinstance(layout.answers, type)]

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


def _source(layout) -> str:
    return (layout.scripts.folder / f"{layout.name}.lua").read_text()


_BY_NAME = {layout.name: layout for layout in LAYOUTS}


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


def test_every_script_says_what_it_answers():
    for layout in LAYOUTS:
        answers = layout.answers
        assert answers in (DATA, CODES_IN_HEADER) or (isinstance(answers, type) and issubclass(answers, enum.Enum)), \
            f"{layout.name}.lua answers {answers!r}"


@pytest.mark.parametrize(("name", "cls"), CODED, ids=[n for n, _ in CODED])
def test_each_enum_holds_exactly_the_codes_its_script_returns(name, cls):
    source = _source(_BY_NAME[name])
    values = {m.value for m in cls}
    if issubclass(cls, str):
        assert words_set(source) == values
    else:
        assert issubclass(cls, enum.IntEnum)
        assert numbers_returned(source) == values, f"{name}.lua returns {sorted(numbers_returned(source))}"
    for code, word in header_names(source).items():
        assert cls(code).name == word, f"{name}.lua calls {code} {word}, {cls.__name__} says {cls(code).name}"


def test_a_script_that_answers_data_has_no_outcomes_to_name():
    """At most one constant answer (registry_add's "1"): two distinct literal
    answers are outcomes, and need an enum."""
    for layout in LAYOUTS:
        if layout.answers is DATA:
            assert len(numbers_returned(_source(layout))) <= 1, f"{layout.name}.lua has outcomes: give it an enum"


def test_codes_no_caller_reads_are_each_named_by_the_header():
    """A script whose callers do not branch on its outcome (a lock released or
    not ours, a claim dropped or not ours) needs no enum, but its header names
    every code it returns, and no other."""
    unread = [layout for layout in LAYOUTS if layout.answers is CODES_IN_HEADER]
    assert unread
    for layout in unread:
        source = _source(layout)
        named = header_names(source)
        assert named and set(named) == numbers_returned(source), f"{layout.name}.lua names {named}"
