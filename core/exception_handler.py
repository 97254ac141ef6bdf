"""Maps every API error to the contract's `{"code", "detail"}` body (docs/contract.md).

A domain error carries its code, status and data. A store being down (MySQL,
Redis, the broker) is 503 `unavailable`, which promises that nothing was taken;
the services keep that promise. Anything else is a bug: 500, logged."""
from __future__ import annotations

import logging

from django.db import DatabaseError
from django.http import Http404
from kombu.exceptions import OperationalError as BrokerError
from redis.exceptions import RedisError
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler

from core.errors import DomainError

logger = logging.getLogger(__name__)

DRF_CODES = {
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


def error_response(exc: Exception) -> tuple[int, dict, dict[str, str]]:
    """(status, body, headers) for any exception an API call can raise: the one
    mapping both DRF views and the lean handlers (orders.api.lean) use."""
    if isinstance(exc, DomainError):
        # The data goes to the log too: at debug for the refusals a sale makes by
        # the thousand (sold out, limit), as a warning for a store being down.
        logger.log(logging.WARNING if exc.http_status >= 500 else logging.DEBUG, "%s %s: %s %s",
                   exc.http_status, exc.code, exc.detail, exc.data or "")
        headers = {} if exc.retry_after is None else {"Retry-After": str(int(exc.retry_after))}
        return exc.http_status, {"code": exc.code, "detail": exc.detail, **exc.extra()}, headers
    if isinstance(exc, Http404):
        return 404, {"code": "not_found", "detail": "Not found."}, {}
    if isinstance(exc, exceptions.APIException):
        code = next((c for cls, c in DRF_CODES.items() if isinstance(exc, cls)), "error")
        headers = {}
        if getattr(exc, "wait", None):
            headers["Retry-After"] = str(int(exc.wait))
        if isinstance(exc, (exceptions.NotAuthenticated, exceptions.AuthenticationFailed)):
            headers["WWW-Authenticate"] = "Token"
            return 401, {"code": code, "detail": str(exc.detail)}, headers
        if isinstance(exc, exceptions.ValidationError):
            return 400, {"code": "invalid", "detail": "Invalid input.", "errors": exc.detail}, {}
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        return exc.status_code, {"code": code, "detail": detail}, headers
    if isinstance(exc, STORE_ERRORS):
        logger.warning("a store is unavailable: %r", exc)
        return 503, {"code": "unavailable", "detail": "A backing service is unavailable; nothing was taken."}, {}
    logger.exception("unhandled API error", exc_info=exc)
    return 500, {"code": "internal_error", "detail": "Internal error."}, {}


def api_exception_handler(exc, context):
    response = exception_handler(exc, context)  # DRF's own bookkeeping (e.g. aborting a transaction)
    status_code, body, headers = error_response(exc)
    if response is None:
        response = Response(status=status_code)
    response.status_code, response.data = status_code, body
    for name, value in headers.items():
        response[name] = value
    return response
