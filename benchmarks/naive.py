"""The naive MySQL-only purchase, for the benchmark's comparison only.

Every click locks the SKU row, checks the key, the per-user limit and the stock,
and writes the order, all in MySQL — as a design without the Redis gate does.
Mounted at /api/v1/bench/mysql-orders only when SECKILL_BENCH_ENDPOINTS is on.
"""
from __future__ import annotations

import uuid
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Sum
from django.urls import path
from django.utils import timezone
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import LimitReached, SaleNotActive, SkuNotFound, SoldOut
from core.retry import with_mysql_retry
from inventory.models import InventoryLog, Sku
from orders.api.input import idempotency_key_of, order_input
from orders.models import Order


def naive_order_place(*, user_id: int, sku_id: str, quantity: int, idempotency_key: str) -> str:
    with transaction.atomic():
        sku = Sku.objects.select_for_update().filter(pk=sku_id).first()
        if sku is None:
            raise SkuNotFound()
        now = timezone.now()
        if sku.status != Sku.Status.ACTIVE or (sku.sale_starts_at and now < sku.sale_starts_at):
            raise SaleNotActive()
        prior = Order.objects.filter(user_id=user_id, idempotency_key=idempotency_key).first()
        if prior is not None:
            return prior.order_id
        if sku.available_stock < quantity:
            raise SoldOut()
        held = Order.objects.filter(
            sku_id=sku_id, user_id=user_id, status__in=[Order.Status.PENDING_PAYMENT, Order.Status.PAID]
        ).aggregate(units=Sum("quantity"))["units"] or 0
        if held + quantity > sku.per_user_limit:
            raise LimitReached()
        Sku.objects.filter(pk=sku_id, available_stock__gte=quantity).update(
            available_stock=F("available_stock") - quantity, locked_stock=F("locked_stock") + quantity)
        order = Order.objects.create(
            order_id=uuid.uuid4().hex, user_id=user_id, sku_id=sku_id, quantity=quantity,
            status=Order.Status.PENDING_PAYMENT, idempotency_key=idempotency_key, created_at=now,
            confirmed_at=now, expires_at=now + timedelta(seconds=settings.SECKILL_PAYMENT_TIMEOUT_SECONDS))
        InventoryLog.objects.create(sku_id=sku_id, operation=InventoryLog.Operation.DECR, quantity=quantity,
                                    order_id=order.order_id, op_id=order.order_id, reason="naive path")
        return order.order_id


class NaiveOrderView(APIView):
    def post(self, request):
        sku_id, quantity = order_input(request.data)
        key = idempotency_key_of(request.META)
        order_id = with_mysql_retry(lambda: naive_order_place(
            user_id=request.user.id, sku_id=sku_id, quantity=quantity, idempotency_key=key))
        return Response({"order_id": order_id, "status": "PENDING_PAYMENT"}, status=202)


urlpatterns = [path("bench/mysql-orders", NaiveOrderView.as_view(), name="bench-mysql-orders")]
