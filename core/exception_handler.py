"""Maps every API error to the `{"code", "detail"}` body of API.md.

A domain error carries its code, status and data. A store being down (MySQL,
Redis, the broker) is 503 `unavailable`, which promises that nothing was taken;
the services keep that promise. Anything else is a bug: 500, logged."""
from __future__ import annotations

import logging

from django.db import DatabaseError
from django.http import Http404
from kombu.exceptions import OperationalError as BrokerError
from redis.exceptions import RedisError
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from core.errors import DomainError

logger = logging.getLogger(__name__)

_DRF_CODES = {
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.AuthenticationFailed: "authentication_failed",
    exceptions.PermissionDenied: "permission_denied",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.Throttled: "throttled",
    exceptions.ParseError: "invalid",
    exceptions.ValidationError: "invalid",
}
# The backing stores: their failures are what 503 means.
STORE_ERRORS = (DatabaseError, RedisError, BrokerError, ConnectionError, TimeoutError)


def api_exception_handler(exc, context):
    if isinstance(exc, DomainError):
        body = {"code": exc.code, "detail": exc.detail, **exc.extra()}
        # The data goes to the log too: at debug for the refusals a sale makes by
        # the thousand (sold out, limit), as a warning for a store being down.
        logger.log(logging.WARNING if exc.http_status >= 500 else logging.DEBUG, "%s %s: %s %s",
                   exc.http_status, exc.code, exc.detail, exc.data or "")
        return Response(body, status=exc.http_status)
    if isinstance(exc, Http404):
        return Response({"code": "not_found", "detail": "Not found."}, status=status.HTTP_404_NOT_FOUND)
    response = exception_handler(exc, context)
    if response is None:
        if isinstance(exc, STORE_ERRORS):
            logger.warning("a store is unavailable: %r", exc)
            return Response({"code": "unavailable", "detail": "A backing service is unavailable; nothing was taken."},
                            status=status.HTTP_503_SERVICE_UNAVAILABLE)
        logger.exception("unhandled API error", exc_info=exc)
        return Response({"code": "internal_error", "detail": "Internal error."},
                        status=status.HTTP_500_INTERNAL_SERVER_ERROR)
    code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), "error")
    if isinstance(exc, exceptions.ValidationError):
        return Response({"code": "invalid", "detail": "Invalid input.", "errors": exc.detail}, status=400)
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    response.data = {"code": code, "detail": detail}
    return response
