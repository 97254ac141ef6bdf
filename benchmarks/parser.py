"""What the JSON body guard costs (core.parsers.parse_json), on the worst
bodies we could build against a benign body of the same size:

    .venv/bin/python -m benchmarks.parser [--rounds N]

Every body is just under the default SECKILL_MAX_BODY_BYTES (16384), where a
hostile body does the most harm. Two families, each with its bound (checked by
core/tests/test_parsers.py, printed here):

- HOSTILE: bodies aimed at the guard itself (escaped quotes and backslashes,
  brackets inside strings, nesting at and past MAX_DEPTH, long strings and
  numbers, escapes, lone surrogates, bad encodings). Each costs at most
  BOUND times a benign body of its size: a JSON object of ordinary keys,
  strings and numbers.
- DENSE: valid JSON with a value every few bytes (`[1,1,...]`, `[[],[],...]`).
  Here json itself builds thousands of objects, several times what the benign
  body costs, whatever guards it; the bound is against `json.loads` of the
  same bytes: the guard and its hooks cost at most BOUND times the parse.

Costs are the best of interleaved rounds (the machine is shared: the best is
what the code costs, the rest is others' load). The last line is a key=value
summary: the worst ratio of each family and a purchase body's cost, ours and
json.loads's, in microseconds.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import time
import timeit
from collections.abc import Callable

BOUND = 3.0
SIZE = 16000
PURCHASE = b'{"sku_id": "DEMO-PHONE", "quantity": 1}'


def fill(head: bytes, unit: bytes, tail: bytes = b"", size: int = SIZE) -> bytes:
    """head + as many units as fit in `size` bytes + tail."""
    return head + unit * ((size - len(head) - len(tail)) // len(unit)) + tail


def listing(item: bytes, size: int = SIZE) -> bytes:
    """A JSON array of the same item, as many as fit in `size` bytes."""
    return b"[" + b",".join([item] * ((size - 1) // (len(item) + 1))) + b"]"


def benign(size: int) -> bytes:
    """An object of ordinary keys, strings and numbers, exactly `size` bytes."""
    fields, n = [], 0
    while True:
        field = b'"field%04d": "an ordinary value, number %d", "count%04d": %d' % (n, n, n, n * 37 % 1000)
        if 2 + len(b", ".join(fields + [field])) + 20 > size:
            break
        fields.append(field)
        n += 1
    head = b"{" + b", ".join(fields) + b', "note": "'
    return head + b"x" * (size - len(head) - 2) + b'"}'


HOSTILE: dict[str, Callable[[], bytes]] = {
    # the bodies the old guard scanned in quadratic time (docs/benchmark.md, "The body guard")
    "33 [ then a string of 8000 \\\"": lambda: b"[" * 33 + b'"' + b'\\"' * 8000,
    "two strings of 4090 \\\"": lambda: (b'"' + b'\\"' * 4090 + b'"') * 2,
    "strings of \\\" at the bound": lambda: b'["' + b'\\"' * 4096 + b'", "' + b'\\"' * 3900 + b'"]',
    "a string of 4097 \\\"": lambda: b'["' + b'\\"' * 4097 + b'"]',
    "strings of \\\\ at the bound": lambda: b'["' + b'\\\\' * 4000 + b'", "' + b'\\\\' * 3990 + b'"]',
    "\\\\ and \\\" in turn": lambda: fill(b'["', b'\\\\\\"', b'"]', 8000) * 2,
    "an odd run of backslashes": lambda: b'"' + b"\\" * (SIZE - 1),
    "16000 quotes": lambda: b'"' * SIZE,
    "33 [ then a quote every 2 bytes": lambda: fill(b"[" * 33, b'"a'),
    "brackets inside strings": lambda: b"[" + b",".join([b'"' + b"[" * 3990 + b'"'] * 4) + b"]",
    "] in strings, 33 levels outside": lambda: b'["' + b"]" * 4000 + b'", "' + b"]" * 4000 + b'", '
                                               + b"[" * 33 + b"]" * 33 + b"]",
    "[] 8000 times": lambda: b"[]" * (SIZE // 2),
    "32 levels 250 times, no commas": lambda: (b"[" * 32 + b"]" * 32) * (SIZE // 64),
    "32 levels and many peaks": lambda: fill(b"[" * 31, b"[]", b"]" * 31),
    "1000 hills of 8 levels": lambda: (b"[" * 8 + b"]" * 8) * (SIZE // 16),
    "2666 hills of 3 levels": lambda: (b"[" * 3 + b"]" * 3) * (SIZE // 6),
    "a sawtooth past 32 levels": lambda: fill(b"", b"[[]"),
    "16000 [": lambda: b"[" * SIZE,
    "8000 levels": lambda: b"[" * (SIZE // 2) + b"]" * (SIZE // 2),
    "a long string": lambda: b'"' + b"x" * (SIZE - 2) + b'"',
    "5300 three-byte characters": lambda: ('"' + "\u4e2d" * 5300 + '"').encode(),
    "4000 three-byte characters": lambda: ('["' + "\u4e2d" * 4000 + '", "' + "x" * 3990 + '"]').encode(),
    "\\u escapes": lambda: fill(b'"', b"\\u0041", b'"'),
    "\\u escapes next to surrogates": lambda: fill(b'"', b"\\ud7ff", b'"'),
    "surrogate pairs": lambda: fill(b'"', b"\\ud83d\\ude00", b'"'),
    "surrogate pairs, a lone one last": lambda: fill(b'"', b"\\ud83d\\ude00", b'\\udc00"'),
    "numbers of 64 digits": lambda: listing(b"9" * 64),
    "a number of 15998 digits": lambda: b"[" + b"9" * (SIZE - 2) + b"]",
    "a string, then 16 kB between": lambda: b'["x",' + b" " * (SIZE - 8) + b"1]",
    "control characters in a string": lambda: b'"' + b"\x01" * (SIZE - 2) + b'"',
    "UTF-16": lambda: benign(SIZE // 2).decode().encode("utf-16"),
}

DENSE: dict[str, Callable[[], bytes]] = {
    "small integers": lambda: listing(b"1"),
    "floats": lambda: listing(b"1.5"),
    "empty strings": lambda: listing(b'""'),
    "short strings": lambda: listing(b'"a"'),
    "empty arrays": lambda: listing(b"[]"),
    "empty objects": lambda: listing(b"{}"),
    "32 levels, 250 times": lambda: listing(b"[" * 31 + b"]" * 31),
    "many keys": lambda: b"{" + b",".join(b'"%d":0' % i for i in range(1950)) + b"}",
}


def _parse(body: bytes) -> str:
    from rest_framework.exceptions import ParseError

    from core.parsers import parse_json
    try:
        parse_json(body)
    except ParseError as exc:
        return f"400: {exc.detail}"
    return "parsed"


def _sample(parse: Callable[[bytes], object], body: bytes, calls: int) -> float:
    """CPU seconds of this thread per call of `parse` on `body`, over `calls`
    calls: what another process takes of the cores is not counted, nor the
    garbage collector's passes (they follow what json allocates, for every
    body alike, and fall on whichever call crosses a threshold)."""
    gc.disable()
    try:
        start = time.thread_time()
        for _ in range(calls):
            try:  # noqa: SIM105 - inside the timed loop, where suppress() would add a cost of its own
                parse(body)
            except ValueError:  # ParseError is none: a body json.loads refuses
                pass
        return (time.thread_time() - start) / calls
    finally:
        gc.enable()


def measure(family: dict[str, Callable[[], bytes]], *, dense: bool, rounds: int = 5,
            calls: int = 2) -> list[dict]:
    """One row per body: its cost, its reference's (the benign body of its size,
    or json.loads of it when `dense`) and their ratio, the best of `rounds`
    interleaved rounds."""
    from core.parsers import parse_json

    def quiet(body: bytes) -> None:
        try:  # noqa: SIM105 - timed, where suppress() would add a cost of its own
            parse_json(body)
        except Exception:  # a refusal is a cost like a value
            pass

    bodies = {name: make() for name, make in family.items()}
    references = {name: body if dense else benign(len(body)) for name, body in bodies.items()}
    reference = json.loads if dense else quiet
    best = {name: [float("inf"), float("inf")] for name in bodies}
    for _ in range(rounds):
        for name, body in bodies.items():
            best[name][0] = min(best[name][0], _sample(quiet, body, calls))
            best[name][1] = min(best[name][1], _sample(reference, references[name], calls))
    return [{"name": name, "bytes": len(body), "outcome": _parse(body), "cost": best[name][0],
             "reference": best[name][1], "ratio": best[name][0] / best[name][1]}
            for name, body in bodies.items()]


def purchase_cost(repeat: int = 7, number: int = 20000) -> tuple[float, float]:
    """Microseconds per purchase body: parse_json's and json.loads's."""
    from core.parsers import parse_json
    ours = min(timeit.repeat(lambda: parse_json(PURCHASE), number=number, repeat=repeat, timer=time.thread_time))
    plain = min(timeit.repeat(lambda: json.loads(PURCHASE), number=number, repeat=repeat, timer=time.thread_time))
    return ours / number * 1e6, plain / number * 1e6


def _print(title: str, reference: str, rows: list[dict]) -> None:
    print(f"{title} (reference: {reference})")
    for row in rows:
        print(f"  {row['name']:36s} {row['bytes']:6d} B {row['cost'] * 1e6:9.1f} us "
              f"{row['reference'] * 1e6:8.1f} us x{row['ratio']:5.2f}  {row['outcome'][:60]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "seckill_site.settings.test")
    import django
    django.setup()
    hostile = measure(HOSTILE, dense=False, rounds=args.rounds)
    dense = measure(DENSE, dense=True, rounds=args.rounds)
    ours, plain = purchase_cost()
    _print("Hostile bodies", "a benign body of the same size", hostile)
    _print("Dense bodies", "json.loads of the same body", dense)
    print(f"Purchase body: parse_json {ours:.2f} us, json.loads {plain:.2f} us")
    print(f"parser_hostile_worst={max(r['ratio'] for r in hostile):.2f} "
          f"parser_dense_worst={max(r['ratio'] for r in dense):.2f} parser_bound={BOUND:.0f} "
          f"parser_purchase_us={ours:.2f} json_loads_purchase_us={plain:.2f}")


if __name__ == "__main__":
    main()
