"""The orders API's reads, as DRF views: validate through the declaration
(orders.api.declarations), call one selector, shape. The writes are the lean
handlers of orders.api.lean; orders.api.urls routes both."""
from __future__ import annotations

from rest_framework.generics import GenericAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.token_cache import Budget
from core.api import JsonOnly, page_checked
from core.errors import OrderNotFound
from orders import selectors
from orders.api.input import order_id_of
from orders.api.output import order_body


class OrderListView(GenericAPIView):
    content_negotiation_class = JsonOnly
    budget = Budget.ORDER_CALLS  # spent by the authentication (SECKILL_ORDER_CALLS_RATE)

    def get(self, request):
        page_checked(request.query_params)
        page = self.paginate_queryset(selectors.order_list(user_id=request.user.id))
        rows = [order_body(selectors.OrderView.of(o)) for o in page]
        if self.paginator.page.number == 1:
            # Newest first: orders still PROCESSING (in Redis only) lead page 1.
            in_flight = selectors.orders_in_flight(user_id=request.user.id, token=request.auth.key)
            rows = [order_body(v) for v in in_flight] + rows
        return self.get_paginated_response(rows)


class OrderDetailView(APIView):
    content_negotiation_class = JsonOnly
    budget = Budget.ORDER_CALLS

    def get(self, request, order_id: str):
        view = selectors.order_get(user_id=request.user.id, token=request.auth.key, order_id=order_id_of(order_id))
        if view is None:
            raise OrderNotFound()
        return Response(order_body(view))
