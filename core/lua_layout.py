"""Each Lua script's contract, declared once: the names of its KEYS and ARGV
in order, and what it answers.

A script's positions are a second copy of its header, and a list typed at a
call site is a third: two keys swapped there corrupt data and nothing fails.
So each script has one `Layout` (beside the enum of its codes), every call
goes through its builder, which takes every value by name, and a test holds
the layout against the script's header and its `#KEYS`/`#ARGV` guard
(inventory/tests/test_lua_layouts.py).

The header names each position in one form: `KEYS[n] name` or `ARGV[n] name`
(`name` a lower-case identifier, then a space, colon or comma and any
description), `ARGV[n..] name` for a list of any length from position n on,
and `ARGV[..] name` for a list that follows the one before it (settle.lua's
three lists). A list's length, when the script needs it, is an argument of
its own, `<list>_count`, which the builder counts.

The builder takes the keys by name from the `sources` it is given (a
`SkuKeys`, a `TokenKeys`: the field is the key's name; a method of the same
name is not a key), or from a keyword of the same name, which wins; every
argument by keyword. A name missing or unknown is a TypeError, before
anything reaches Redis.
"""
from __future__ import annotations

import dataclasses
import enum
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.redis.calls import Call
from core.redis.scripts import Scripts


class Answers(enum.Enum):
    """What a script without an enum of its own answers."""

    DATA = "data"  # lists, counts, a figure: no outcome to name
    # Outcome codes no caller branches on: the header alone names them (and a
    # test holds them against the codes the script returns).
    CODES_IN_HEADER = "codes in header"


DATA = Answers.DATA
CODES_IN_HEADER = Answers.CODES_IN_HEADER


@dataclass(frozen=True)
class Many:
    """A list of arguments of any length (the last arguments of a script);
    `width`: its items come in groups of this many (pairs, triples)."""

    name: str
    width: int = 1


@dataclass(frozen=True)
class CountOf:
    """An argument holding the length of a list the script takes (`Many`)."""

    of: str

    @property
    def name(self) -> str:
        return f"{self.of}_count"


def many(name: str, *, width: int = 1) -> Many:
    return Many(name, width)


def count_of(name: str) -> CountOf:
    return CountOf(name)


Arg = str | Many | CountOf
_IDENTIFIER = re.compile(r"[a-z][a-z0-9_]*")
_declared: dict[Path, dict[str, Layout]] = {}


def _name(item: Arg) -> str:
    return item if isinstance(item, str) else item.name


def _getter(get: Callable[..., Callable], names: tuple[str, ...]) -> Callable[[object], tuple]:
    """operator.attrgetter or itemgetter of these names, always answering a
    tuple (theirs answer one name's value bare)."""
    if len(names) == 1:
        one = get(names[0])
        return lambda source: (one(source),)
    return get(*names) if names else (lambda source: ())


class Layout:
    """The KEYS and ARGV of `<name>.lua` in the folder of `scripts`, and its
    answers (an enum of its codes, DATA or CODES_IN_HEADER)."""

    def __init__(self, scripts: Scripts, name: str, *, keys: Sequence[str], argv: Sequence[Arg] = (),
                 answers: type[enum.Enum] | Answers):
        self.scripts, self.name, self.answers = scripts, name, answers
        self.keys, self.argv = tuple(keys), tuple(argv)
        names = [*self.keys, *(_name(a) for a in self.argv)]
        bad = [n for n in names if not _IDENTIFIER.fullmatch(n)]
        if bad or len(set(names)) != len(names):
            raise ValueError(f"{name}.lua: names must be distinct lower-case identifiers: {names}")
        lists = [a.name for a in self.argv if isinstance(a, Many)]
        first_list = next((i for i, a in enumerate(self.argv) if isinstance(a, Many)), len(self.argv))
        if len(lists) != len(self.argv) - first_list:
            raise ValueError(f"{name}.lua: a list of arguments comes after every single one")
        if any(isinstance(a, CountOf) and a.of not in lists for a in self.argv):
            raise ValueError(f"{name}.lua: a count names a list the script does not take")
        # What a caller passes: the keys, then every argument but the counts (the builder makes them).
        self._passed = frozenset(self.keys) | frozenset(_name(a) for a in self.argv if not isinstance(a, CountOf))
        self._plain = all(isinstance(a, str) for a in self.argv)
        self._read_keys = _getter(operator.attrgetter, self.keys)
        self._read_args = _getter(operator.itemgetter, self.argv)
        self._field_sources: set[type] = set()  # dataclasses seen to hold every key as a field
        folder = _declared.setdefault(scripts.folder, {})
        if name in folder:
            raise ValueError(f"{name}.lua has a layout already")
        folder[name] = self

    @property
    def script(self):
        return self.scripts.get(self.name)

    def build(self, *sources, **values) -> tuple[list, list]:
        """(keys, args) of a call: each key from `values` or the first source
        that has it (a string), each argument from `values`."""
        keys, args = self._build(sources, values)
        return list(keys), list(args)

    def call(self, *sources, **values) -> Call:
        """The call, to ride in a pipeline (core.redis.calls.run_together)."""
        keys, args = self._build(sources, values)
        return Call(self.script, keys, args)

    def run(self, *sources, **values):
        keys, args = self._build(sources, values)
        return self.script(keys=keys, args=args)

    def _build(self, sources: tuple, values: dict) -> tuple[Sequence, Sequence]:
        # The common call, every key a field of one dataclass and every argument
        # a single value, is read by two getters and nothing else: the click's
        # path builds two calls. (As many values as arguments, each found: none
        # unknown, no key among them.)
        if self._plain and len(sources) == 1 and len(values) == len(self.argv) and self._holds_every_key(sources[0]):
            try:
                return self._read_keys(sources[0]), self._read_args(values)
            except KeyError:
                pass
        if not self._passed.issuperset(values):
            raise TypeError(f"{self.name}.lua takes no {sorted(values.keys() - self._passed)}")
        keys = self._keys_of(sources, values)
        args = []
        for item in self.argv:
            if isinstance(item, str):
                if item not in values:
                    raise TypeError(f"{self.name}.lua: no argument {item!r} given")
                args.append(values[item])
            elif isinstance(item, CountOf):
                args.append(len(values[item.of]))
            else:
                part = values[item.name]
                if len(part) % item.width:
                    raise ValueError(f"{self.name}.lua: {item.name} comes in groups of {item.width}")
                args.extend(part)
        return keys, args

    def _holds_every_key(self, source) -> bool:
        """Is every key a field of `source`, a dataclass (a method of the same
        name, TokenKeys.budget, is no key)?"""
        kind = type(source)
        if kind in self._field_sources:
            return True
        if not dataclasses.is_dataclass(kind) or not set(self.keys) <= {f.name for f in dataclasses.fields(kind)}:
            return False
        self._field_sources.add(kind)
        return True

    def _keys_of(self, sources: tuple, values: dict) -> list:
        keys = []
        for name in self.keys:
            value = values.get(name)
            if value is None:
                for source in sources:
                    value = getattr(source, name, None)
                    if isinstance(value, str):
                        break
                else:
                    raise TypeError(f"{self.name}.lua: no key {name!r} given")
            keys.append(value)
        return keys

    def positions(self) -> list[tuple[str, str, str]]:
        """(KEYS or ARGV, position, name) of each entry, as the header writes them."""
        out = [("KEYS", str(i), name) for i, name in enumerate(self.keys, 1)]
        after_list = False
        for i, item in enumerate(self.argv, 1):
            if isinstance(item, Many):
                out.append(("ARGV", ".." if after_list else f"{i}..", item.name))
                after_list = True
            else:
                out.append(("ARGV", str(i), _name(item)))
        return out

    def __repr__(self) -> str:
        return f"Layout({self.name!r})"


def declared() -> dict[Path, dict[str, Layout]]:
    """Every layout, by its scripts' folder and its script's name."""
    return {folder: dict(layouts) for folder, layouts in _declared.items()}


# --- Holding a layout against its script -----------------------------------------------

_HEADER = re.compile(r"\A--\[\[(.*?)\]\]", re.S)
_ENTRY = re.compile(r"\b(KEYS|ARGV)\[([^\]]*)\](?:[ \t]+([a-z][a-z0-9_]*)(?=[\s:,]|$))?")
_POSITION = re.compile(r"\d+|\d+\.\.|\.\.")
_GUARD = re.compile(r"^if (.+?) then\s*\n\s*return redis\.error_reply\(", re.M)
_TERM = re.compile(r"#(KEYS|ARGV)(?:\s*%\s*(\d+))?\s*(~=|<=|>=|<|>|==)\s*(\d+)")
_COMPARE: dict[str, Callable[[int, int], bool]] = {
    "~=": lambda a, b: a != b, "==": lambda a, b: a == b, "<": lambda a, b: a < b,
    ">": lambda a, b: a > b, "<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b,
}


def header_positions(source: str) -> list[tuple[str, str, str]]:
    """Every `KEYS[..] name` / `ARGV[..] name` of the header, in order; a
    ValueError for one not in that form (prose names a position by its name)."""
    head = _HEADER.search(source)
    if not head:
        raise ValueError("no --[[ header ]] at the top")
    out = []
    for m in _ENTRY.finditer(head.group(1)):
        kind, position, name = m.groups()
        if not _POSITION.fullmatch(position) or not name:
            raise ValueError(f"{m.group(0)!r} is not `{kind}[n] name`")
        out.append((kind, position, name))
    return out


def guard(source: str) -> Callable[[int, int], bool]:
    """The script's count check (`if #KEYS ~= 2 or #ARGV < 3 then return
    redis.error_reply(...)`) as a function of (keys, args): True when it refuses."""
    m = _GUARD.search(_HEADER.sub("", source))
    if not m:
        raise ValueError("no `if #KEYS ... then return redis.error_reply(...)` guard")
    terms = []
    for text in m.group(1).split(" or "):
        term = _TERM.fullmatch(text.strip())
        if not term:
            raise ValueError(f"guard term {text.strip()!r} is not `#KEYS|#ARGV [% m] <op> n`")
        kind, modulo, op, bound = term.groups()
        terms.append((kind == "KEYS", int(modulo) if modulo else 0, _COMPARE[op], int(bound)))

    def refuses(nkeys: int, nargs: int) -> bool:
        for is_keys, modulo, compare, bound in terms:
            n = nkeys if is_keys else nargs
            if compare(n % modulo if modulo else n, bound):
                return True
        return False
    return refuses


def _entry(entry: tuple[str, str, str] | None) -> str:
    return "nothing" if entry is None else f"{entry[0]}[{entry[1]}] {entry[2]}"


def mismatches(layout: Layout, source: str) -> list[str]:
    """How `layout` disagrees with its script's header and guard (empty: it agrees)."""
    try:
        header, refuses = header_positions(source), guard(source)
    except ValueError as exc:
        return [f"{layout.name}.lua: {exc}"]
    problems = []
    want = layout.positions()
    if header != want:
        pairs = [(h, w) for h, w in zip(header + [None] * len(want), want + [None] * len(header)) if h != w]
        problems += [f"{layout.name}.lua: the header has {_entry(h)}, the layout {_entry(w)}" for h, w in pairs]
    fixed = sum(not isinstance(a, Many) for a in layout.argv)
    lists = [a for a in layout.argv if isinstance(a, Many)]
    nkeys, nargs = len(layout.keys), fixed + sum(a.width for a in lists)
    if refuses(nkeys, nargs) or (lists and refuses(nkeys, fixed + 2 * sum(a.width for a in lists))):
        problems.append(f"{layout.name}.lua's guard refuses what its layout builds")
    if not refuses(nkeys - 1, nargs) or not refuses(nkeys + 1, nargs):
        problems.append(f"{layout.name}.lua's guard lets a call with another number of keys through")
    wrong_args = [fixed - 1] if lists else [nargs - 1, nargs + 1]
    if any(n >= 0 and not refuses(nkeys, n) for n in wrong_args):
        problems.append(f"{layout.name}.lua's guard lets a call with too few or too many args through")
    return problems
