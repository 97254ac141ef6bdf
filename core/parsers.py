"""The API's JSON parser, with a bound on the body it will read."""
from __future__ import annotations

from django.conf import settings
from rest_framework.parsers import JSONParser

from core.errors import TooLarge


class BoundedJSONParser(JSONParser):
    """Reads at most SECKILL_MAX_BODY_BYTES; a larger body is 413 `too_large`
    (its declared length is checked before anything is read)."""

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
        from io import BytesIO

        return super().parse(BytesIO(body), media_type, parser_context)
