"""The inventory API's reads: validate through the declaration
(inventory.api.declarations), call one selector, shape."""
from __future__ import annotations

from rest_framework.generics import GenericAPIView
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import JsonOnly, page_checked
from core.errors import SkuNotFound
from inventory import health, selectors
from inventory.api.declarations import SKU_PATH
from inventory.api.output import sku_output
from inventory.models import Sku
from inventory.services.snapshots import stock_warm


class SkuListView(GenericAPIView):
    content_negotiation_class = JsonOnly
    queryset = Sku.objects.all()

    def get(self, request):
        page_checked(request.query_params)
        page = self.paginate_queryset(Sku.objects.order_by("sku_id"))
        views = selectors.sku_views(skus=list(page))
        return self.get_paginated_response([sku_output(v, staff=request.user.is_staff) for v in views])


class SkuDetailView(APIView):
    content_negotiation_class = JsonOnly

    def get(self, request, sku_id: str):
        sku = selectors.sku_get(sku_id=sku_id) if SKU_PATH.spec.accepts(sku_id) else None
        if sku is None:
            raise SkuNotFound()
        stock_warm(sku_id=sku_id)
        [view] = selectors.sku_views(skus=[sku])
        return Response(sku_output(view, staff=request.user.is_staff))


class HealthView(APIView):
    content_negotiation_class = JsonOnly
    permission_classes = [AllowAny]
    authentication_classes: list = []

    def get(self, request):
        body = health.system_health()
        failing = [k for k, v in body.items() if v != "ok"]
        if not failing:
            return Response(body)
        return Response({**body, "code": "unavailable", "detail": f"failing: {', '.join(failing)}"}, status=503)
