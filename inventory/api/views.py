from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.generics import GenericAPIView
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from inventory import redis_store, selectors
from inventory.services.skus import stock_warm
from inventory.api.serializers import HealthOutput, SkuOutput, sku_output
from core.errors import SkuNotFound
from inventory.models import Sku


class SkuListView(GenericAPIView):
    serializer_class = SkuOutput
    queryset = Sku.objects.all()

    @extend_schema(responses=SkuOutput(many=True))
    def get(self, request):
        page = self.paginate_queryset(Sku.objects.order_by("sku_id"))
        views = selectors.sku_views(skus=list(page))
        return self.get_paginated_response([sku_output(v, staff=request.user.is_staff) for v in views])


class SkuDetailView(APIView):
    @extend_schema(responses=SkuOutput)
    def get(self, request, sku_id: str):
        sku = selectors.sku_get(sku_id=sku_id)
        if sku is None:
            raise SkuNotFound()
        stock_warm(sku_id=sku_id)
        [view] = selectors.sku_views(skus=[sku])
        return Response(sku_output(view, staff=request.user.is_staff))


class HealthView(APIView):
    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(responses={200: HealthOutput, 503: HealthOutput})
    def get(self, request):
        body = selectors.system_health()
        failing = [k for k, v in body.items() if v != "ok"]
        if not failing:
            return Response(body)
        return Response({**body, "code": "unavailable", "detail": f"failing: {', '.join(failing)}"}, status=503)
