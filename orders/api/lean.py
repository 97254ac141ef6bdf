"""The hot calls of the orders API as plain Django handlers: the purchase, its
baseline, pay and cancel.

They take the same steps and give the same answers as every other API call
(token auth and the user's budget, purchases or order calls, in one Redis
round trip, a bounded JSON body, the
error bodies of core.exception_handler), without DRF's request wrapping,
negotiation, permission and renderer machinery around them: on this machine
that machinery costs more CPU than a purchase itself (docs/benchmark.md,
"The cost of a click").
The checks are those of each endpoint's declaration (orders.api.declarations,
through orders.api.input); orders.api.urls routes the declared methods here.
"""
from __future__ import annotations

from time import perf_counter

from django.http import HttpRequest, HttpResponse
from rest_framework import exceptions

from accounts.authentication import authenticate_request
from accounts.token_cache import Budget
from core.api import json_response as _json
from core.exception_handler import STORE_ERRORS, error_response
from core.metrics import purchase_observed
from core.parsers import read_json
from orders import selectors
from orders.api.input import idempotency_key_of, order_id_of, order_input, pay_input
from orders.api.output import iso_ms, iso_utc, order_body
from orders.services import life, payments
from orders.services.place import order_place


def _authenticated(request: HttpRequest, *, budget: Budget = Budget.ORDER_CALLS):
    found = authenticate_request(request.META, budget=budget)
    if found is None:
        raise exceptions.NotAuthenticated()
    return found


def place(request: HttpRequest) -> HttpResponse:
    """Take stock and answer 202 PROCESSING (or what the key made before)."""
    started = perf_counter()
    try:
        user, auth = _authenticated(request, budget=Budget.PURCHASES)
        sku_id, quantity = order_input(read_json(request.META, request))
        key = idempotency_key_of(request.META)
        placed = order_place(user_id=user.id, token=auth.key, sku_id=sku_id, quantity=quantity,
                             idempotency_key=key, prior=auth.prior)
        body = {"order_id": placed.order_id, "status": "PROCESSING", "sku_id": placed.sku_id,
                "quantity": placed.quantity, "created_at": None, "replayed": not placed.created}
        if placed.created:
            body["created_at"] = iso_ms(placed.reserved_ms)
        else:
            # A retry: answer with what that order is now (a rare, read-only path).
            # Its stock was taken by the first request, so a store that cannot be
            # read now changes nothing of the 202: it just says less.
            try:
                current = selectors.order_get(user_id=user.id, token=auth.key, order_id=placed.order_id)
            except STORE_ERRORS:
                current = None
            if current is not None:
                body["status"] = current.status
                body["created_at"] = iso_utc(current.created_at)
        response, outcome = _json(202, body), "accepted" if placed.created else "replayed"
    except Exception as exc:
        status, body, headers = error_response(exc)
        response, outcome = _json(status, body, headers), body["code"]
    purchase_observed(outcome=outcome, started=started)
    return response


def baseline(request: HttpRequest) -> HttpResponse:
    """Everything `place` does before the take (authenticate, throttle, read
    and check the body and the key), then 202 VALIDATED: the benchmark's baseline."""
    try:
        _authenticated(request, budget=Budget.PURCHASES)
        sku_id, quantity = order_input(read_json(request.META, request))
        idempotency_key_of(request.META)
        return _json(202, {"order_id": "", "status": "VALIDATED", "sku_id": sku_id, "quantity": quantity,
                           "created_at": None})
    except Exception as exc:
        return _json(*error_response(exc))


def pay(request: HttpRequest, order_id: str) -> HttpResponse:
    try:
        user, auth = _authenticated(request)
        payments.buyer_pay_check()
        payment_id = pay_input(read_json(request.META, request))
        order_id = order_id_of(order_id)
        view = life.order_pay(user_id=user.id, token=auth.key, order_id=order_id, payment_id=payment_id)
        return _json(200, order_body(view))
    except Exception as exc:
        return _json(*error_response(exc))


def cancel(request: HttpRequest, order_id: str) -> HttpResponse:
    try:
        user, auth = _authenticated(request)
        view = life.order_cancel(user_id=user.id, token=auth.key, order_id=order_id_of(order_id))
        return _json(200, order_body(view))
    except Exception as exc:
        return _json(*error_response(exc))
