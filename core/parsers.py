"""Reading an API request's JSON body, with a bound on what is read and on
what the parser is asked to build.

A body is at most SECKILL_MAX_BODY_BYTES; within that, a hostile body is
refused as 400 `invalid` before it can cost more than a scan: nesting deeper
than MAX_DEPTH (the C parser recurses once per level, and 3000 levels end in a
RecursionError, a 500), a number of more than MAX_NUMBER_CHARS characters (int()
is quadratic in its digits), NaN / Infinity (not JSON), a string longer than
MAX_STRING_CHARS, bytes that are not UTF-8 (a BOM, UTF-16, a lone surrogate).
The purchase body is tiny: the checks that cost more than a byte count run
only when that count says they could fail (notes: about 0.3 us a body).
"""
from __future__ import annotations

import json
import re
from itertools import accumulate

from django.conf import settings
from rest_framework import exceptions
from rest_framework.parsers import JSONParser

from core.errors import TooLarge

MAX_DEPTH = 32
MAX_NUMBER_CHARS = 64
MAX_STRING_CHARS = 4096

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_LONG_STRING = re.compile(rb'"(?:[^"\\]|\\.){%d,}' % (MAX_STRING_CHARS + 1), re.DOTALL)
# Everything but the brackets, for bytes.translate(None, delete=...).
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


class HostileBody(exceptions.ParseError):
    """400 `invalid` (core.exception_handler maps every ParseError so)."""


def _number(text: str, kind=int):
    if len(text) > MAX_NUMBER_CHARS:
        raise HostileBody(f"A number has more than {MAX_NUMBER_CHARS} characters.")
    value = kind(text)
    if kind is float and value in (float("inf"), float("-inf")):
        raise HostileBody("A number is out of range.")
    return value


def _constant(name: str):
    raise HostileBody(f"{name} is not JSON.")


_DECODER = json.JSONDecoder(parse_int=_number, parse_float=lambda text: _number(text, float),
                            parse_constant=_constant)


def _depth(body: bytes) -> int:
    """The deepest nesting of arrays and objects, brackets inside strings aside."""
    brackets = _STRING.sub(b"", body).translate(None, delete=_NOT_BRACKETS)
    return max(accumulate(_STEP[b] for b in brackets), default=0)


def _has_lone_surrogate(value) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


def parse_json(body: bytes) -> object:
    """The value of a JSON body (UTF-8, no BOM), or HostileBody / ParseError."""
    # A body cannot nest deeper than its number of opening brackets, nor hold
    # a string longer than itself: the exact scans run only past those counts.
    if body.count(b"[") + body.count(b"{") > MAX_DEPTH and _depth(body) > MAX_DEPTH:
        raise HostileBody(f"The body nests deeper than {MAX_DEPTH} levels.")
    if len(body) > MAX_STRING_CHARS and _LONG_STRING.search(body):
        raise HostileBody(f"A string is longer than {MAX_STRING_CHARS} characters.")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise HostileBody("The body is not UTF-8.") from None
    try:
        value = _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        raise exceptions.ParseError(f"JSON parse error - {exc}") from None
    # "\ud800" is valid JSON text but no Unicode string: MySQL could not even
    # compare it. Only a body with such an escape needs the walk.
    if b"\\u" in body and re.search(rb"\\u[dD][89a-fA-F]", body) and _has_lone_surrogate(value):
        raise HostileBody("A string holds a lone surrogate.")
    return value


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
