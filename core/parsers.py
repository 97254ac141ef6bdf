"""Reading an API request's JSON body, with a bound on what is read."""
from __future__ import annotations

import json
from io import BytesIO

from django.conf import settings
from rest_framework import exceptions
from rest_framework.parsers import JSONParser

from core.errors import TooLarge


def read_json(meta: dict, stream) -> object:
    """The JSON body of a request (WSGI `META` and its input stream): at most
    SECKILL_MAX_BODY_BYTES (413 `too_large` beyond; the declared length is
    checked before anything is read); an empty body is {}; not JSON is 400."""
    media = (meta.get("CONTENT_TYPE") or "").split(";")[0].strip().lower()
    limit = settings.SECKILL_MAX_BODY_BYTES
    declared = meta.get("CONTENT_LENGTH") or ""
    if declared.isdigit() and int(declared) > limit:
        raise TooLarge(limit=limit)
    if declared == "0" or (not declared and not meta.get("HTTP_TRANSFER_ENCODING")):
        return {}
    if media != "application/json":
        raise exceptions.UnsupportedMediaType(media or "none")
    body = stream.read(min(int(declared), limit + 1)) if declared.isdigit() else stream.read(limit + 1)
    if len(body) > limit:
        raise TooLarge(limit=limit)
    try:
        return json.loads(body)
    except ValueError as exc:
        raise exceptions.ParseError(f"JSON parse error - {exc}") from None


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser with the same bound (see `read_json`)."""

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
        return super().parse(BytesIO(body), media_type, parser_context)
