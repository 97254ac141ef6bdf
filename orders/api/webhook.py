"""POST payments/webhook: the payment provider's capture callback.

A plain Django handler on the API's middleware chain (seckill_site.wsgi routes
/api/v1/ there), with no token: the provider proves itself by signing the raw
body (orders.services.payments.signature_verify). The signature is checked on
the bytes as received, before anything parses them, so an unsigned body never
reaches the JSON parser and a signed one cannot be re-encoded on the way.

Answers: 200 whatever the capture did (paid now, paid before with this payment
id, or recorded as a refund to make), so the provider's retries are harmless;
409 not_yet with Retry-After for an order still in flight (nothing recorded);
400 bad_signature (nothing changes); 400 invalid for a signed body that is not
a capture (checked through its declaration, orders.api.declarations.WEBHOOK_BODY);
413 too_large; 404 not_found while SECKILL_PAYMENT_WEBHOOK_SECRET is unset (the
endpoint does not exist then, nor in the schema).
"""
from __future__ import annotations

from io import BytesIO

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions

from core.api import json_response
from core.errors import OrderNotFound
from core.exception_handler import error_response
from core.parsers import read_body, read_json
from orders.api.input import webhook_input
from orders.services import payments


@csrf_exempt  # signed by the provider, not a browser form; the API chain has no CSRF anyway
def webhook(request: HttpRequest) -> HttpResponse:
    try:
        secret = settings.SECKILL_PAYMENT_WEBHOOK_SECRET
        if not secret:
            raise OrderNotFound()
        if request.method != "POST":
            raise exceptions.MethodNotAllowed(request.method)
        raw = read_body(request.META, request)
        payments.signature_verify(secret=secret, header=request.META.get("HTTP_SECKILL_SIGNATURE"), body=raw)
        order_id, payment_id, amount, currency = webhook_input(read_json(request.META, BytesIO(raw)))
        done = payments.payment_capture(order_id=order_id, payment_id=payment_id, amount=amount, currency=currency)
        return json_response(200, {"order_id": done.order_id, "payment_id": done.payment_id, "outcome": done.outcome,
                           "status": done.order_status, "refund_reason": done.refund_reason})
    except Exception as exc:
        return json_response(*error_response(exc))
