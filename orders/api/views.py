"""One thin view per operation: validate, call one service or selector, shape."""
from __future__ import annotations

from datetime import datetime, timezone as dt_timezone

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import IdempotencyKeyRequired, InvalidInput, OrderNotFound
from core.exception_handler import STORE_ERRORS
from orders import selectors
from orders.services import life, place
from orders.api.serializers import ErrorBody, OrderAccepted, OrderOutput, OrderPlaceInput

_DATETIME = serializers.DateTimeField()

IDEMPOTENCY_HEADER = OpenApiParameter(
    "Idempotency-Key", str, OpenApiParameter.HEADER, required=True,
    description="1..64 characters; the same key from the same user returns the same order.",
)


def idempotency_key_of(request) -> str:
    key = request.META.get("HTTP_IDEMPOTENCY_KEY")
    if key is None or not (1 <= len(key) <= 64) or not key.isprintable():
        raise IdempotencyKeyRequired()
    return key


def validated_order_input(request) -> dict:
    if not isinstance(request.data, dict):
        raise InvalidInput("The body must be a JSON object.")
    serializer = OrderPlaceInput(data=request.data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class OrderListCreateView(GenericAPIView):
    serializer_class = OrderOutput
    # POST spends from the user's purchase budget (SECKILL_THROTTLE_RATE), in the
    # authentication's own Redis round trip: a throttled click takes nothing.
    purchase_throttle = True

    @extend_schema(request=OrderPlaceInput, parameters=[IDEMPOTENCY_HEADER],
                   responses={202: OrderAccepted, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody,
                              422: ErrorBody, 503: ErrorBody})
    def post(self, request):
        data = validated_order_input(request)
        key = idempotency_key_of(request)
        placed = place.order_place(
            user_id=request.user.id, token=request.auth.key, sku_id=data["sku_id"],
            quantity=data["quantity"], idempotency_key=key,
            prior=request.auth.prior,
        )
        body = {"order_id": placed.order_id, "status": "PROCESSING", "sku_id": placed.sku_id,
                "quantity": placed.quantity, "created_at": None, "replayed": not placed.created}
        if placed.created:
            # A plain dict, not a serializer: this is the hot path of a sale.
            body["created_at"] = _DATETIME.to_representation(
                datetime.fromtimestamp(placed.reserved_ms / 1000, tz=dt_timezone.utc))
        else:
            # A retry: answer with what that order is now (a rare, read-only path).
            # Its stock was taken by the first request, so a store that cannot be
            # read now changes nothing of the 202: it just says less.
            try:
                current = selectors.order_get(user_id=request.user.id, token=request.auth.key,
                                              order_id=placed.order_id)
            except STORE_ERRORS:
                current = None
            if current is not None:
                body.update(OrderAccepted({**body, "status": current.status, "created_at": current.created_at}).data)
        return Response(body, status=status.HTTP_202_ACCEPTED)

    @extend_schema(responses=OrderOutput(many=True))
    def get(self, request):
        page = self.paginate_queryset(selectors.order_list(user_id=request.user.id))
        rows = [OrderOutput(selectors.OrderView.of(o)).data for o in page]
        if self.paginator.page.number == 1:
            # Newest first: orders still PROCESSING (in Redis only) lead page 1.
            rows = [OrderOutput(v).data for v in selectors.orders_in_flight(user_id=request.user.id, token=request.auth.key)] + rows
        return self.get_paginated_response(rows)


class OrderDetailView(APIView):
    @extend_schema(responses={200: OrderOutput, 404: ErrorBody})
    def get(self, request, order_id: str):
        view = selectors.order_get(user_id=request.user.id, token=request.auth.key, order_id=order_id)
        if view is None:
            raise OrderNotFound()
        return Response(OrderOutput(view).data)


class BaselineView(APIView):
    """Authenticates, throttles and validates exactly like POST orders, then takes nothing.

    The benchmark's baseline: the ratio of the purchase to this is what the
    Redis gate and the publish cost.
    """

    purchase_throttle = True

    @extend_schema(request=OrderPlaceInput, parameters=[IDEMPOTENCY_HEADER], responses={202: OrderAccepted})
    def post(self, request):
        data = validated_order_input(request)
        idempotency_key_of(request)
        return Response({"order_id": "", "status": "VALIDATED", "sku_id": data["sku_id"],
                         "quantity": data["quantity"], "created_at": None}, status=status.HTTP_202_ACCEPTED)


class PayInput(serializers.Serializer):
    payment_id = serializers.CharField(max_length=128, required=False,
                                       help_text="The payment provider's id; a retried callback pays once.")


class OrderPayView(APIView):
    @extend_schema(request=PayInput, responses={200: OrderOutput, 404: ErrorBody, 409: ErrorBody})
    def post(self, request, order_id: str):
        data = request.data if isinstance(request.data, dict) else {}
        body = PayInput(data=data)
        body.is_valid(raise_exception=True)
        order = life.order_pay(user_id=request.user.id, token=request.auth.key, order_id=order_id,
                                   payment_id=body.validated_data.get("payment_id"))
        return Response(OrderOutput(selectors.OrderView.of(order)).data)


class OrderCancelView(APIView):
    @extend_schema(request=None, responses={200: OrderOutput, 404: ErrorBody, 409: ErrorBody})
    def post(self, request, order_id: str):
        order = life.order_cancel(user_id=request.user.id, token=request.auth.key, order_id=order_id)
        return Response(OrderOutput(selectors.OrderView.of(order)).data)
