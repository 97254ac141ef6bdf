"""Maps every API error to the `{"code", "detail"}` body of API.md."""
from __future__ import annotations

import logging

from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from inventory.errors import DomainError

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


def api_exception_handler(exc, context):
    if isinstance(exc, DomainError):
        body = {"code": exc.code, "detail": exc.detail}
        body.update(exc.extra())
        return Response(body, status=exc.http_status)
    if isinstance(exc, Http404):
        return Response({"code": "not_found", "detail": "Not found."}, status=status.HTTP_404_NOT_FOUND)
    response = exception_handler(exc, context)
    if response is None:
        # Anything unexpected from a store is reported as 503: API.md promises
        # that a 503 means nothing was taken, and every service keeps that.
        logger.exception("unhandled API error", exc_info=exc)
        return Response(
            {"code": "unavailable", "detail": "A backing service is unavailable; nothing was taken."},
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
        )
    code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), "error")
    if isinstance(exc, exceptions.ValidationError):
        return Response({"code": "invalid", "detail": "Invalid input.", "errors": exc.detail}, status=400)
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    response.data = {"code": code, "detail": detail}
    return response
