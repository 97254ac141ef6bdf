"""Reading an API request's JSON body, with a bound on what is read and on
what the parser is asked to build.

A body is at most SECKILL_MAX_BODY_BYTES; within that, a hostile body is
refused as 400 `invalid` before it can cost more than a scan: nesting deeper
than MAX_DEPTH (the C parser recurses once per level, so the depth is known
before it runs), a number of more than MAX_NUMBER_CHARS characters (int() is
quadratic in its digits) or out of a float's range, NaN / Infinity (not
JSON), a string of more than MAX_STRING_CHARS characters (escapes and
multi-byte characters count one each), bytes that are not UTF-8 (a BOM,
UTF-16), a lone surrogate escape (valid JSON text, but no Unicode string).

The scan is linear, and runs in C: a few passes of bytes methods (replace,
split, translate, find) and of regular expressions that never step back,
never a Python loop over the bytes nor a pattern that can restart from every
quote (quadratic in the quotes of a body, with the GIL held all along). What
it costs on the worst bodies we could build, each
against a benign body of its size, is printed by `python -m benchmarks.parser`
and bounded by core/tests/test_parsers.py.

A small body with few brackets (every purchase and payment body) is not
scanned at all: its numbers are checked one by one as json reads them, so it
costs the parse alone.
"""
from __future__ import annotations

import json
import re

from django.conf import settings
from rest_framework import exceptions
from rest_framework.parsers import JSONParser

from core.errors import TooLarge

MAX_DEPTH = 32
MAX_NUMBER_CHARS = 64
MAX_STRING_CHARS = 4096

# The escapes that could hide a quote from a split on quotes, each folded to
# one byte that is neither: a string keeps its number of characters (an escape
# is one). `\\` first, so that in `\\"` the quote still closes the string.
_BACKSLASH, _QUOTE, _FOLDED = b"\\\\", b'\\"', b"_"
# Between the strings only the brackets count, `{}` as `[]`.
_AS_BRACKETS = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_OPEN = b"["[0]
# A string of more than MAX_STRING_CHARS characters has at least as many bytes
# without a quote, and such a run covers one of the windows of this size laid
# end to end from its start: a body with a quote in every window has none.
_WINDOW = MAX_STRING_CHARS // 2
# A number's characters as `0` but its exponent's mark and plus sign, as `e`
# (JSON has `+` only there): a number of more than MAX_NUMBER_CHARS
# characters without an exponent is a run of `0`s. A float out of range has
# an exponent of three digits or more, a long one with an exponent a long
# mantissa: for a body with either, every float goes through `_float`.
_NUMBERS = bytes(b"0"[0] if c in b"0123456789.-" else b"e"[0] if c in b"eE+" else b" "[0] for c in range(256))
_LONG_NUMBER = b"0" * (MAX_NUMBER_CHARS + 1)
_LONG_MANTISSA = b"0" * (MAX_NUMBER_CHARS - 3)
_BIG_EXPONENT = b"e000"
_INFINITE = (float("inf"), float("-inf"))
# Up to this size a body's numbers are checked one by one by the decoder's
# hooks (a call each, a hundred at most), which is cheaper there than a pass
# over its bytes: every purchase and payment body is this small.
_SMALL = 256
# json pairs a high surrogate escape with the low one right after it, and only
# so. With every `\ud` marked and each hex digit classed (H: 8-b, after the
# mark a high surrogate; L: c-f, a low one; N: 0-7), an escape is the mark and
# three classes, and a pair the marked H, any two, the marked L.
_MARK = b"\x01"  # no control byte is left in a body json has read
_SURROGATE_CLASSES = bytes.maketrans(b"0123456789abcdef", b"NNNNNNNNHHHHLLLL")
_HIGH, _LOW = _MARK + b"H", _MARK + b"L"
_PAIRS = tuple(_HIGH + a + b + _LOW for a in (b"N", b"H", b"L") for b in (b"N", b"H", b"L"))


def _nested(levels: int) -> re.Pattern:
    """Brackets nested at most `levels` deep, groups side by side at every
    level. Every repeat is possessive: the match never steps back, so it
    reads each bracket once (one pass, whatever their shape)."""
    pattern = b""
    for _ in range(levels):
        pattern = rb"(?:\[" + pattern + rb"\])*+"
    return re.compile(pattern)


_NESTED = _nested(MAX_DEPTH - 1)


class HostileBody(exceptions.ParseError):
    """400 `invalid` (core.exception_handler maps every ParseError so)."""


def _int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise HostileBody(f"A number has more than {MAX_NUMBER_CHARS} characters.")
    return int(text)


def _float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise HostileBody(f"A number has more than {MAX_NUMBER_CHARS} characters.")
    value = float(text)
    if value in _INFINITE:
        raise HostileBody("A number is out of range.")
    return value


def _constant(name: str):
    raise HostileBody(f"{name} is not JSON.")


# In a body past _SMALL, integers and most floats are json's own (in C, no
# call per number): the scan has bounded their length before the parser runs.
_DECODER = json.JSONDecoder(parse_constant=_constant)
_CHECKING_FLOATS = json.JSONDecoder(parse_float=_float, parse_constant=_constant)
_CHECKING_NUMBERS = json.JSONDecoder(parse_int=_int, parse_float=_float, parse_constant=_constant)


def parse_json(body: bytes) -> object:
    """The value of a JSON body (UTF-8, no BOM), or HostileBody / ParseError."""
    # A body cannot nest deeper than its number of opening brackets, nor hold
    # a string longer than itself: a small one with few brackets (a purchase)
    # needs no scan, its numbers are checked as they are read.
    if len(body) <= _SMALL and body.count(b"[") + body.count(b"{") <= MAX_DEPTH:
        decoder = _CHECKING_NUMBERS
    else:
        decoder = _scan(body)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise HostileBody("The body is not UTF-8.") from None
    try:
        value = decoder.decode(text)
    except (ValueError, RecursionError) as exc:
        raise exceptions.ParseError(f"JSON parse error - {exc}") from None
    if b"\\u" in body and _lone_surrogate(body):
        raise HostileBody("A string holds a lone surrogate.")
    return value


def _scan(body: bytes) -> json.JSONDecoder:
    """HostileBody when the body nests deeper than MAX_DEPTH, holds a string
    of more than MAX_STRING_CHARS characters or a number of more than
    MAX_NUMBER_CHARS; otherwise the decoder it needs."""
    size = len(body)
    deep = body.count(b"[") + body.count(b"{") > MAX_DEPTH
    numbers = body.translate(_NUMBERS)
    long_mantissa = _LONG_MANTISSA in numbers
    long_number = long_mantissa and _LONG_NUMBER in numbers
    if deep or long_number or size > MAX_STRING_CHARS:
        # With the escapes folded every quote opens or closes a string, so the
        # split's even pieces are what lies between the strings. That holds up
        # to the body's first error at least, and the parser reads nothing
        # past it: whatever follows cannot make it recurse.
        folded = body.replace(_BACKSLASH, _FOLDED).replace(_QUOTE, _FOLDED) if b"\\" in body else body
        between = b"".join(folded.split(b'"')[0::2]) if deep or long_number else b""
        if deep and _too_deep(between):
            raise HostileBody(f"The body nests deeper than {MAX_DEPTH} levels.")
        if size > MAX_STRING_CHARS and _holds_long_string(folded):
            raise HostileBody(f"A string is longer than {MAX_STRING_CHARS} characters.")
        if long_number and _LONG_NUMBER in between.translate(_NUMBERS):
            raise HostileBody(f"A number has more than {MAX_NUMBER_CHARS} characters.")
    return _CHECKING_FLOATS if long_mantissa or _BIG_EXPONENT in numbers else _DECODER


def _too_deep(between: bytes) -> bool:
    """Whether the brackets of `between` (a body without its strings) nest
    deeper than MAX_DEPTH before the first `]` that closes nothing (where the
    parser stops if not before, at level 0): for JSON, its depth."""
    brackets = between.translate(_AS_BRACKETS, _NOT_BRACKETS)
    opens = brackets.count(b"[")
    if opens <= MAX_DEPTH:
        return False
    # Closing what is left open raises no level and lets every `[` pair up,
    # so the match stops only at a `]` closing nothing or at the `[` of a
    # group that goes too deep. Taking the innermost pairs out first (a
    # quicker pass than the match, and most of the brackets of an array of
    # arrays or objects) leaves every group one level less deep.
    brackets += b"]" * (2 * opens - len(brackets))
    brackets = brackets.replace(b"[]", b"")
    end = _NESTED.match(brackets).end()
    return end < len(brackets) and brackets[end] == _OPEN


def _holds_long_string(folded: bytes) -> bool:
    """Whether a string of the body (escapes folded) has more than
    MAX_STRING_CHARS characters: only a run of as many bytes without a quote
    could, and only when it starts inside a string (after an odd number of
    quotes) is it decoded; at most one per MAX_STRING_CHARS bytes is."""
    at, counted, quotes, size = 0, 0, 0, len(folded)
    while at + _WINDOW <= size:
        if folded.find(b'"', at, at + _WINDOW) >= 0:
            at += _WINDOW
            continue
        start = folded.rfind(b'"', 0, at) + 1
        end = folded.find(b'"', at + _WINDOW)
        end = size if end < 0 else end
        quotes += folded.count(b'"', counted, start)
        counted = start
        if quotes % 2 and end - start > MAX_STRING_CHARS and _too_long(folded[start:end]):
            return True
        at = end + 1
    return False


def _lone_surrogate(body: bytes) -> bool:
    """Whether a `\\u` escape of the body is a surrogate without its pair
    ("\\ud800" is valid JSON text but no Unicode string: MySQL could not even
    compare it): there are as many pairs as high and as low ones, or not."""
    escapes = body.replace(_BACKSLASH, _FOLDED).lower()
    if b"\\ud" not in escapes:
        return False
    escapes = escapes.replace(b"\\ud", _MARK).translate(_SURROGATE_CLASSES)
    highs, lows = escapes.count(_HIGH), escapes.count(_LOW)
    if not highs and not lows:
        return False
    pairs = sum(map(escapes.count, _PAIRS))
    return highs != pairs or lows != pairs


def _too_long(folded: bytes) -> bool:
    """Whether a string's inside (escapes folded, one character each) has more
    than MAX_STRING_CHARS characters; not when it is no JSON string (the
    parser says why)."""
    # A `\\u` escape is one character in six bytes: the count often tells.
    if len(folded) - 5 * folded.count(b"\\u") <= MAX_STRING_CHARS:
        return False
    try:
        return len(json.loads(b'"%s"' % folded)) > MAX_STRING_CHARS
    except ValueError:
        return False


def read_json(meta: dict, stream) -> object:
    """The JSON body of a request (WSGI `META` and its input stream): at most
    SECKILL_MAX_BODY_BYTES (413 `too_large` beyond; the declared length is
    checked before anything is read); an empty body is {}; a body that is not
    application/json is 415; not JSON, or hostile (see `parse_json`), is 400."""
    media = (meta.get("CONTENT_TYPE") or "").split(";")[0].strip().lower()
    declared = _declared_length(meta)
    if declared == "0" or (not declared and not meta.get("HTTP_TRANSFER_ENCODING")):
        return {}
    if media != "application/json":
        raise exceptions.UnsupportedMediaType(media or "none")
    return parse_json(read_body(meta, stream))


def _declared_length(meta: dict) -> str:
    """CONTENT_LENGTH, refused (413) before anything is read when over the limit."""
    declared = meta.get("CONTENT_LENGTH") or ""
    if declared.isdigit() and int(declared) > settings.SECKILL_MAX_BODY_BYTES:
        raise TooLarge(limit=settings.SECKILL_MAX_BODY_BYTES)
    return declared


def read_body(meta: dict, stream) -> bytes:
    """The raw body as received, at most SECKILL_MAX_BODY_BYTES (413 beyond;
    the declared length is checked before anything is read): for a caller
    that must see the bytes before they are parsed (a signed webhook)."""
    limit = settings.SECKILL_MAX_BODY_BYTES
    declared = _declared_length(meta)
    body = stream.read(min(int(declared), limit + 1) if declared.isdigit() else limit + 1)
    if len(body) > limit:
        raise TooLarge(limit=limit)
    return body


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser with the same bounds (see `read_json`)."""

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.SECKILL_MAX_BODY_BYTES
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        if declared and declared.isdigit() and int(declared) > limit:
            raise TooLarge(limit=limit)
        if stream is None:
            return super().parse(stream, media_type, parser_context)
        body = stream.read(limit + 1)
        if len(body) > limit:
            raise TooLarge(limit=limit)
        return parse_json(body)
