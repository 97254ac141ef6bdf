from __future__ import annotations

from django.conf import settings
from rest_framework import serializers


class StrictIntegerField(serializers.IntegerField):
    """An integer in JSON, not a string, float or boolean that looks like one."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class OrderPlaceInput(serializers.Serializer):
    sku_id = serializers.CharField(max_length=64, trim_whitespace=False)
    quantity = StrictIntegerField(min_value=1, max_value=settings.SECKILL_MAX_QUANTITY)

    def validate_sku_id(self, value: str) -> str:
        if not value or not value.isprintable() or value != value.strip():
            raise serializers.ValidationError("sku_id must be a printable id without surrounding spaces.")
        return value


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
