"""Hostile bodies are 400 `invalid` with a code, never a 500: in the parser
itself, and on every endpoint that reads a body, over real HTTP. The parser
refuses exactly what the bounds say (a corpus, and Hypothesis against a
reference that reads the bytes one by one), and no body costs more than
benchmarks.parser.BOUND times a benign one of its size (the scan before issue
26 took seconds on a 16 kB body of escaped quotes)."""
from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import time
import timeit
import uuid

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from rest_framework.exceptions import ParseError

from benchmarks.parser import BOUND, DENSE, HOSTILE as WORST, PURCHASE, measure
from core.parsers import MAX_DEPTH, MAX_NUMBER_CHARS, MAX_STRING_CHARS, parse_json
from testsupport.processes import start_web

DEEP = b"[" * 3000 + b"]" * 3000
HOSTILE = {
    "deep array": DEEP,
    "deep object": b'{"a":' * 2500 + b"1" + b"}" * 2500,  # 15 kB: under the 16 kB limit
    "huge integer": b'{"sku_id": "X", "quantity": ' + b"9" * 5000 + b"}",
    "long integer": b'{"quantity": ' + b"1" * 65 + b"}",
    "infinite float": b'{"quantity": 1e999}',
    "NaN": b'{"quantity": NaN}',
    "Infinity": b'{"quantity": -Infinity}',
    "long string": b'{"sku_id": "' + b"x" * 5000 + b'"}',
    "UTF-8 BOM": b'\xef\xbb\xbf{"sku_id": "X", "quantity": 1}',
    "UTF-16": '{"sku_id": "X", "quantity": 1}'.encode("utf-16"),
    "invalid UTF-8": b'{"sku_id": "\xff\xfe", "quantity": 1}',
    "lone surrogate": b'{"sku_id": "\\udc00", "quantity": 1}',
    # issue 26: quadratic in the scan before it (2 s, and 0.5-1 s)
    "33 [ and 8000 escaped quotes": b"[" * 33 + b'"' + b'\\"' * 8000,
    "two strings of 4090 escaped quotes": (b'"' + b'\\"' * 4090 + b'"') * 2,
}


@pytest.mark.parametrize("body", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_body_is_a_parse_error(body):
    with pytest.raises(ParseError):
        parse_json(body)


def test_what_is_allowed_still_parses():
    nested = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    assert parse_json(nested) is not None
    # Brackets inside strings are no nesting; a pair of escapes is one character.
    assert parse_json(b'{"sku_id": "' + b"[" * 100 + b'", "e": "\\ud83d\\ude00"}')["e"] == "\U0001F600"
    assert parse_json(b'{"quantity": ' + b"9" * 64 + b"}")["quantity"] == int("9" * 64)


def _nest(levels: int, inside: bytes = b"1") -> bytes:
    return b'{"a": [' * (levels // 2) + b"[" * (levels % 2) + inside + b"]" * (levels % 2) + b"]}" * (levels // 2)


def _string(chars: int, unit: str = "x") -> bytes:
    return json.dumps(unit * chars, ensure_ascii=False).encode()


# body -> whether it parses. Checked against the scan before issue 26 as well:
# it answered the same but for the last three, which it refused (it counted a
# string's bytes, an escape as its length, and read from a closing quote on).
CORPUS = {
    "purchase": (PURCHASE, True),
    "32 levels": (_nest(32), True),
    "33 levels": (_nest(33), False),
    "32 levels of objects only": (b'{"a":' * 32 + b"1" + b"}" * 32, True),
    "33 levels, 32 after a string of ]": (b'["' + b"]" * 40 + b'", ' + _nest(32) + b"]", False),
    "32 levels, brackets in strings": (_nest(32, b'"[[[{{{"'), True),
    "an escaped quote, then brackets": (b'["\\"[[[[[[", ' + _nest(31) + b"]", True),
    "an escaped backslash closes": (b'["\\\\", ' + _nest(32) + b"]", False),
    "33 opens never closed": (b"[" * 33, False),
    "31 opens never closed": (b"[" * 31 + b"[]" * 40, False),
    "a ] closing nothing, then 33 levels": (b"[]]" + _nest(33), False),
    "4096 characters": (_string(4096), True),
    "4097 characters": (_string(4097), False),
    "4096 escaped quotes": (_string(4096, '"'), True),
    "4097 escaped quotes": (_string(4097, '"'), False),
    "4097 escaped backslashes": (_string(4097, "\\"), False),
    "a key of 4097 characters": (b"{" + _string(4097) + b": 1}", False),
    "64 digits": (b"[" + b"9" * 64 + b"]", True),
    "65 digits": (b"[" + b"9" * 65 + b"]", False),
    "a sign and 64 digits": (b"[-" + b"9" * 64 + b"]", False),
    "65 digits in a large body": (b'["' + b"x" * 300 + b'", ' + b"9" * 65 + b"]", False),
    "65 digits in a string": (b'["' + b"9" * 300 + b'", 1]', True),
    "a float of 64 characters": (b"[1." + b"5" * 62 + b"]", True),
    "a float of 65 characters": (b"[1." + b"5" * 63 + b"]", False),
    "a long mantissa, a short exponent": (b'["' + b"x" * 300 + b'", 1.' + b"5" * 60 + b"e+12]", False),
    "1e308": (b'{"x": "' + b"x" * 300 + b'", "n": 1e308}', True),
    "1e309": (b'{"x": "' + b"x" * 300 + b'", "n": 1e309}', False),
    "-1E+999 in a small body": (b"[-1E+999]", False),
    "1e-999": (b'{"x": "' + b"x" * 300 + b'", "n": 1e-999}', True),
    "a high surrogate alone": (b'["\\ud800"]', False),
    "a low surrogate alone": (b'["\\uDC00"]', False),
    "a surrogate pair": (b'["\\uD83D\\uDE00"]', True),
    "two highs, one low": (b'["\\ud83d\\ud83d\\ude00"]', False),
    "one high, two lows": (b'["\\ud83d\\ude00\\ude00"]', False),
    "an escaped backslash, then u": (b'["\\\\ud800"]', True),
    "a lone surrogate in a key": (b'{"\\udc00": 1}', False),
    "\\ud7ff is no surrogate": (b'["\\ud7ff\\ue000"]', True),
    # the scan before issue 26 refused these three
    "4000 three-byte characters": (_string(4000, "\u4e2d"), True),
    "1000 \\u escapes": (b'"' + b"\\u0041" * 1000 + b'"', True),
    "a string, then 5000 bytes between": (b'["x",' + b" " * 5000 + b"1]", True),
}


@pytest.mark.parametrize(("body", "parses"), CORPUS.values(), ids=CORPUS.keys())
def test_the_corpus_is_answered_as_the_bounds_say(body, parses):
    assert _verdict(body) == parses
    assert parses == (reference(body) is not REFUSED)


def _verdict(body: bytes) -> bool:
    try:
        parse_json(body)
    except ParseError:
        return False
    return True


REFUSED = object()


class _Refused(Exception):
    pass


def _int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise _Refused
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if len(text) > MAX_NUMBER_CHARS or value in (float("inf"), float("-inf")):
        raise _Refused
    return value


def _constant(name: str):
    raise _Refused


_READER = json.JSONDecoder(parse_int=_int, parse_float=_float, parse_constant=_constant)


def _depth(body: bytes) -> int:
    """The deepest brackets outside strings, read a byte at a time as json
    reads them, up to a `]` that closes nothing (where json stops)."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in body:
        if in_string:
            in_string, escaped = (True, False) if escaped else (byte != 0x22, byte == 0x5C)
        elif byte == 0x22:
            in_string = True
        elif byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif byte in b"]}":
            if not depth:
                break
            depth -= 1
    return deepest


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)


def reference(body: bytes) -> object:
    """What parse_json must answer, the slow and obvious way: the value, or
    REFUSED (the bounds read one by one, on the parsed value where they can)."""
    if _depth(body) > MAX_DEPTH:
        return REFUSED
    try:
        value = _READER.decode(body.decode("utf-8"))
    except (ValueError, _Refused):
        return REFUSED
    for string in _strings(value):
        if len(string) > MAX_STRING_CHARS or any("\ud800" <= char <= "\udfff" for char in string):
            return REFUSED
    return value


def _answer(body: bytes) -> object:
    try:
        return parse_json(body)
    except ParseError:  # anything else fails the test
        return REFUSED


def _same(ours: object, theirs: object) -> bool:
    if ours is REFUSED or theirs is REFUSED:
        return ours is theirs
    return json.dumps(ours, sort_keys=True) == json.dumps(theirs, sort_keys=True)


TRICKY = "ax\"\\[]{}\u00e9\u4e2d\U0001F600\ud800\udc00\n"
scalars = (st.none() | st.booleans() | st.integers(min_value=-10 ** 70, max_value=10 ** 70)
           | st.floats(allow_nan=False) | st.text(alphabet=TRICKY, max_size=20))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(alphabet=TRICKY, max_size=5), inner, max_size=4), max_leaves=40)
# What JSON's structure is made of, to cut and splice bodies with.
PIECES = st.sampled_from([b"[", b"]", b"{", b"}", b'"', b"\\", b'\\"', b"\\\\", b"\\ud800", b"\\udc00",
                          b",", b":", b"1", b"-", b"e", b"E+999", b"9" * 40, b"x" * 3000, b" ", b"\xff"])
PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _encode(value, ascii_only: bool) -> bytes:
    return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


@PROPERTY
@given(values, st.booleans())
def test_a_json_value_reads_back_as_the_reference_reads_it(value, ascii_only):
    body = _encode(value, ascii_only)
    expected = reference(body)
    assert _same(_answer(body), expected)
    if expected is not REFUSED:
        assert _same(parse_json(body), json.loads(body))


@PROPERTY
@given(values, st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 2), PIECES), max_size=6))
def test_a_body_cut_and_spliced_is_answered_as_the_reference_answers(value, edits):
    body = _encode(value, False)
    for at, action, piece in edits:
        at %= len(body) + 1
        body = body[:at] + (b"" if action == 0 else piece) + body[at + (action < 2):]
    assert _same(_answer(body), reference(body))


@PROPERTY
@given(st.binary(max_size=600) | st.lists(PIECES, max_size=60).map(b"".join))
def test_any_bytes_are_a_value_or_a_parse_error(body):
    assert _same(_answer(body), reference(body))


@PROPERTY
@given(st.integers(MAX_DEPTH - 3, MAX_DEPTH + 3), st.lists(st.sampled_from("[{"), min_size=40, max_size=40),
       st.text(alphabet="[]{}\"\\x", max_size=8), st.integers(0, 200))
def test_the_depth_bound_is_exact(levels, kinds, decoy, padding):
    body, decoy = b"", json.dumps(decoy).encode()  # a key, or an item before the next level
    for kind in kinds[:levels]:
        body += b"{" + decoy + b": " if kind == "{" else b"[" + decoy + b", "
    body += b"1" + b" " * padding
    for kind in reversed(kinds[:levels]):
        body += b"}" if kind == "{" else b"]"
    assert (_answer(body) is REFUSED) == (levels > MAX_DEPTH)


@PROPERTY
@given(st.integers(MAX_STRING_CHARS - 4, MAX_STRING_CHARS + 4),
       st.text(alphabet=TRICKY.replace("\ud800", "").replace("\udc00", ""), min_size=1, max_size=9),
       st.booleans(), st.integers(0, 3))
def test_the_string_bound_is_exact(chars, unit, ascii_only, before):
    body = _encode(["y" * 4000] * before + [(unit * chars)[:chars]], ascii_only)
    assert (_answer(body) is REFUSED) == (chars > MAX_STRING_CHARS)


@PROPERTY
@given(st.integers(1, 70), st.integers(0, 8), st.sampled_from(["", "e5", "E+12", "e-400", "e308", "e309"]),
       st.booleans(), st.booleans())
def test_the_number_bound_is_exact(digits, fraction, exponent, negative, large):
    number = ("-" if negative else "") + "1" * digits + ("." + "5" * fraction if fraction else "") + exponent
    body = (b'{"x": "' + b"x" * 300 * large + b'", "n": ' + number.encode() + b"}")
    out_of_range = float(number) in (float("inf"), float("-inf"))
    assert (_answer(body) is REFUSED) == (len(number) > MAX_NUMBER_CHARS or out_of_range)


def test_no_body_costs_more_than_the_bound(capsys):
    # The CPU time of this thread, the best of interleaved rounds: ratios of
    # the same machine's figures, whatever else it runs (-s prints them).
    hostile = measure(WORST, dense=False, rounds=5, calls=1)
    dense = measure(DENSE, dense=True, rounds=5, calls=1)
    with capsys.disabled():
        print("\nparser cost, x its reference (a benign body of the size; json.loads for the dense ones):")
        for row in hostile + dense:
            print(f"  {row['name']:36s} {row['bytes']:6d} B {row['cost'] * 1e6:8.1f} us x{row['ratio']:.2f}")
    over = [(row["name"], round(row["ratio"], 2)) for row in hostile + dense if row["ratio"] > BOUND]
    # A row over the bound is measured again, longer, before it fails the run: one
    # preempted sample on this shared machine can triple a ratio, a quadratic
    # scan stays hundreds of times over however often it is timed.
    for _ in range(2):
        if not over:
            break
        names = {name for name, _ in over}
        again = (measure({n: f for n, f in WORST.items() if n in names}, dense=False, rounds=15, calls=1)
                 + measure({n: f for n, f in DENSE.items() if n in names}, dense=True, rounds=15, calls=1))
        over = [(row["name"], round(row["ratio"], 2)) for row in again if row["ratio"] > BOUND]
    assert not over


def test_a_purchase_body_costs_what_json_loads_does():
    ours, plain = [], []
    for _ in range(15):
        ours.append(timeit.timeit(lambda: parse_json(PURCHASE), number=2000, timer=time.thread_time))
        plain.append(timeit.timeit(lambda: json.loads(PURCHASE), number=2000, timer=time.thread_time))
    assert min(ours) <= 1.25 * min(plain)


SECRET = "parsers-test-secret"


@pytest.fixture(scope="module")
def hostile_web(process_env):
    proc = start_web(process_env, name="web-parsers", SECKILL_PAYMENT_WEBHOOK_SECRET=SECRET)
    yield proc
    proc.stop()


def send(port: int, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", path, body, {"Content-Type": "application/json", **headers})
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read())


def signed(body: bytes) -> dict[str, str]:
    stamp = str(int(time.time()))
    digest = hmac.new(SECRET.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return {"Seckill-Signature": f"t={stamp},v1={digest}"}


@pytest.mark.parametrize("name", ["deep array", "deep object", "huge integer", "UTF-16", "lone surrogate"])
def test_every_endpoint_that_reads_a_body_answers_400(hostile_web, make_buyers, name):
    body = HOSTILE[name]
    auth = {"Authorization": f"Token {make_buyers(1)[0][1]}", "Idempotency-Key": uuid.uuid4().hex}
    order_id = uuid.uuid4().hex
    for path, headers in [("/api/v1/orders", auth), ("/api/v1/baseline", auth),
                          (f"/api/v1/orders/{order_id}/pay", auth),
                          ("/api/v1/payments/webhook", signed(body))]:
        status, answer = send(hostile_web.port, path, body, headers)
        assert (status, answer["code"]) == (400, "invalid"), (path, status, answer)
