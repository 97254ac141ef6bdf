from __future__ import annotations

from django.conf import settings
from rest_framework import serializers

from orders.api.input import SKU_ID_MAX


class OrderPlaceInput(serializers.Serializer):
    """The purchase body, for the schema; the checks themselves are
    orders.api.input.order_input."""

    sku_id = serializers.CharField(max_length=SKU_ID_MAX, help_text="Printable, no surrounding spaces.")
    quantity = serializers.IntegerField(min_value=1, max_value=settings.SECKILL_MAX_QUANTITY)


class OrderAccepted(serializers.Serializer):
    order_id = serializers.CharField()
    status = serializers.CharField()
    sku_id = serializers.CharField()
    quantity = serializers.IntegerField()
    created_at = serializers.DateTimeField(allow_null=True)


class OrderOutput(serializers.Serializer):
    order_id = serializers.CharField()
    sku_id = serializers.CharField()
    quantity = serializers.IntegerField()
    status = serializers.CharField()
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    confirmed_at = serializers.DateTimeField(allow_null=True)
    paid_at = serializers.DateTimeField(allow_null=True)
    closed_at = serializers.DateTimeField(allow_null=True)
    failure_reason = serializers.CharField(allow_blank=True)


class ErrorBody(serializers.Serializer):
    code = serializers.CharField()
    detail = serializers.CharField()
