"""One thin view per operation: validate, call one service or selector, shape."""
from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import OrderNotFound
from orders import selectors
from orders.api import lean
from orders.api.output import order_body
from orders.api.serializers import ErrorBody, OrderAccepted, OrderOutput, OrderPlaceInput

IDEMPOTENCY_HEADER = OpenApiParameter(
    "Idempotency-Key", str, OpenApiParameter.HEADER, required=True,
    description="1..64 characters; the same key from the same user returns the same order.",
)


class OrderListCreateView(GenericAPIView):
    serializer_class = OrderOutput

    def dispatch(self, request, *args, **kwargs):
        # A purchase takes its own, leaner path (orders.api.lean); the
        # listing is an ordinary DRF view.
        if request.method == "POST":
            return lean.place(request)
        return super().dispatch(request, *args, **kwargs)

    @extend_schema(request=OrderPlaceInput, parameters=[IDEMPOTENCY_HEADER],
                   responses={202: OrderAccepted, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody,
                              413: ErrorBody, 422: ErrorBody, 429: ErrorBody, 503: ErrorBody})
    def post(self, request):  # documents the call for the schema; dispatch serves it
        return lean.place(request._request)

    @extend_schema(responses=OrderOutput(many=True))
    def get(self, request):
        page = self.paginate_queryset(selectors.order_list(user_id=request.user.id))
        rows = [order_body(selectors.OrderView.of(o)) for o in page]
        if self.paginator.page.number == 1:
            # Newest first: orders still PROCESSING (in Redis only) lead page 1.
            in_flight = selectors.orders_in_flight(user_id=request.user.id, token=request.auth.key)
            rows = [order_body(v) for v in in_flight] + rows
        return self.get_paginated_response(rows)


class OrderDetailView(APIView):
    @extend_schema(responses={200: OrderOutput, 404: ErrorBody})
    def get(self, request, order_id: str):
        view = selectors.order_get(user_id=request.user.id, token=request.auth.key, order_id=order_id)
        if view is None:
            raise OrderNotFound()
        return Response(order_body(view))


class BaselineView(APIView):
    """Authenticates, throttles and validates exactly like POST orders, then
    takes nothing: the benchmark's baseline (orders.api.lean.baseline)."""

    def dispatch(self, request, *args, **kwargs):
        return lean.baseline(request)

    @extend_schema(request=OrderPlaceInput, parameters=[IDEMPOTENCY_HEADER], responses={202: OrderAccepted})
    def post(self, request):  # documents the call for the schema; dispatch serves it
        return lean.baseline(request._request)


class PayInput(serializers.Serializer):
    """The pay body, for the schema; the check is orders.api.input.pay_input."""

    payment_id = serializers.CharField(max_length=128, required=False,
                                       help_text="The payment provider's id; a retried callback pays once.")


class OrderPayView(APIView):
    def dispatch(self, request, *args, **kwargs):
        if request.method == "POST":
            return lean.pay(request, kwargs["order_id"])
        return super().dispatch(request, *args, **kwargs)

    @extend_schema(request=PayInput, responses={200: OrderOutput, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody})
    def post(self, request, order_id: str):  # documents the call for the schema; dispatch serves it
        return lean.pay(request._request, order_id)


class OrderCancelView(APIView):
    def dispatch(self, request, *args, **kwargs):
        if request.method == "POST":
            return lean.cancel(request, kwargs["order_id"])
        return super().dispatch(request, *args, **kwargs)

    @extend_schema(request=None, responses={200: OrderOutput, 404: ErrorBody, 409: ErrorBody})
    def post(self, request, order_id: str):  # documents the call for the schema; dispatch serves it
        return lean.cancel(request._request, order_id)
