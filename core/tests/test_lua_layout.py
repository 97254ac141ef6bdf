"""core.lua_layout on its own: the builder takes every position by name and
refuses a name missing or unknown; the header and guard readers. (Every
project script's layout against its script: inventory/tests/test_lua_layouts.py.)"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from core.lua_layout import DATA, Layout, count_of, guard, header_positions, many, mismatches


@dataclass(frozen=True)
class Keys:
    stock: str = "s"
    inflight: str = "i"
    done: str = "d"


def layout(tmp_path, name="demo", **kw) -> Layout:
    scripts = SimpleNamespace(folder=tmp_path, get=lambda n: None)
    return Layout(scripts, name, answers=DATA, **kw)


def test_keys_come_from_the_sources_by_name_and_a_keyword_wins(tmp_path):
    demo = layout(tmp_path, keys=("stock", "inflight", "other"), argv=("order_id", "lifetime_ms"))
    keys, args = demo.build(Keys(), other="o", lifetime_ms=5, order_id="x")
    assert (keys, args) == (["s", "i", "o"], ["x", 5])
    assert demo.build(Keys(), inflight="I", other="o", order_id="x", lifetime_ms=5)[0] == ["s", "I", "o"]


def test_a_name_missing_or_unknown_is_refused(tmp_path):
    demo = layout(tmp_path, keys=("stock", "budget"), argv=("order_id",))
    with pytest.raises(TypeError, match="budget"):
        demo.build(SimpleNamespace(stock="s", budget=lambda: "a method is no key"), order_id="x")
    with pytest.raises(TypeError, match="order_id"):
        demo.build(Keys(), budget="b")
    with pytest.raises(TypeError, match="orderid"):
        demo.build(Keys(), budget="b", order_id="x", orderid="y")


def test_lists_are_built_with_their_counts(tmp_path):
    settle = layout(tmp_path, keys=("stock",), argv=(count_of("confirmed"), "lifetime_ms", many("confirmed"),
                                                     many("returned")))
    assert settle.build(Keys(), confirmed=["a", "b"], returned=["c"], lifetime_ms=9)[1] == [2, 9, "a", "b", "c"]
    assert settle.positions() == [("KEYS", "1", "stock"), ("ARGV", "1", "confirmed_count"),
                                  ("ARGV", "2", "lifetime_ms"), ("ARGV", "3..", "confirmed"),
                                  ("ARGV", "..", "returned")]
    with pytest.raises(TypeError):
        settle.build(Keys(), confirmed=[], returned=[], lifetime_ms=9, confirmed_count=0)  # the builder counts
    pairs = layout(tmp_path, name="pairs", keys=("stock",), argv=(many("items", width=2),))
    with pytest.raises(ValueError, match="groups of 2"):
        pairs.build(Keys(), items=["k", "v", "k2"])


def test_a_layout_is_declared_once_and_well_formed(tmp_path):
    layout(tmp_path, name="once", keys=("stock",))
    with pytest.raises(ValueError, match="already"):
        layout(tmp_path, name="once", keys=("stock",))
    for bad in ({"keys": ("stock", "stock")}, {"keys": ("Stock",)},
                {"keys": ("stock",), "argv": (many("ids"), "after")},
                {"keys": ("stock",), "argv": (count_of("ids"),)}):
        with pytest.raises(ValueError, match=r"^bad\.lua: "):
            layout(tmp_path, name="bad", **bad)


def test_the_guard_reads_counts_remainders_and_bounds():
    refuses = guard("--[[ h ]]\nif #KEYS ~= 1 or #ARGV < 1 or #ARGV % 2 ~= 1 then\n"
                    "  return redis.error_reply('x')\nend")
    assert not refuses(1, 3) and refuses(1, 2) and refuses(2, 3) and refuses(1, 0)
    with pytest.raises(ValueError, match="is not `#KEYS|#ARGV"):
        guard("if #KEYS ~= 1 and ARGV[1] == '' then\n  return redis.error_reply('x')\nend")


HEADER = """--[[ demo: a script
KEYS[1] stock  KEYS[2] inflight
ARGV[1] order_id  ARGV[2] lifetime_ms (ms)
]]
if #KEYS ~= 2 or #ARGV ~= 2 then
  return redis.error_reply('demo: expects 2 keys and 2 args')
end
return 1
"""


def test_a_layout_is_held_against_its_header_and_guard(tmp_path):
    good = layout(tmp_path, name="good", keys=("stock", "inflight"), argv=("order_id", "lifetime_ms"))
    assert mismatches(good, HEADER) == []
    assert header_positions(HEADER)[1] == ("KEYS", "2", "inflight")
    swapped = layout(tmp_path, name="swapped", keys=("inflight", "stock"), argv=("order_id", "lifetime_ms"))
    assert mismatches(swapped, HEADER) == ["swapped.lua: the header has KEYS[1] stock, the layout KEYS[1] inflight",
                                           "swapped.lua: the header has KEYS[2] inflight, the layout KEYS[2] stock"]
    short = layout(tmp_path, name="short", keys=("stock", "inflight"), argv=("order_id",))
    assert any("guard refuses" in m for m in mismatches(short, HEADER))
    loose = HEADER.replace("#ARGV ~= 2", "#ARGV < 2")
    assert any("too few or too many" in m for m in mismatches(good, loose))
