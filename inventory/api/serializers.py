from __future__ import annotations

from rest_framework import serializers

from inventory.selectors import SkuView


def sku_output(view: SkuView, *, staff: bool) -> dict:
    sku = view.sku
    body = {
        "sku_id": sku.sku_id,
        "name": sku.name,
        "price": str(sku.price),
        "available": view.available,
        "total": sku.total_stock,
        "per_user_limit": sku.per_user_limit,
        "sale_starts_at": serializers.DateTimeField().to_representation(sku.sale_starts_at) if sku.sale_starts_at else None,
        "sale_ends_at": serializers.DateTimeField().to_representation(sku.sale_ends_at) if sku.sale_ends_at else None,
        "status": sku.status,
        "sale_state": view.sale_state,
    }
    if staff:
        body["buckets"] = {
            "total": sku.total_stock, "available": sku.available_stock, "frozen": sku.frozen_stock,
            "locked": sku.locked_stock, "sold": sku.sold_stock,
        }
        body["in_flight"] = view.live.inflight if view.live is not None else 0
        body["redis_warm"] = view.live is not None
    return body


class SkuOutput(serializers.Serializer):
    sku_id = serializers.CharField()
    name = serializers.CharField()
    price = serializers.CharField()
    available = serializers.IntegerField(help_text="Live figure from the Redis gate.")
    total = serializers.IntegerField()
    per_user_limit = serializers.IntegerField()
    sale_starts_at = serializers.DateTimeField(allow_null=True)
    sale_ends_at = serializers.DateTimeField(allow_null=True)
    status = serializers.CharField()
    sale_state = serializers.CharField()
    buckets = serializers.DictField(child=serializers.IntegerField(), required=False,
                                    help_text="Staff only: MySQL buckets.")
    in_flight = serializers.IntegerField(required=False, help_text="Staff only: reserved, not yet confirmed.")


class HealthOutput(serializers.Serializer):
    mysql = serializers.CharField()
    redis = serializers.CharField()
    broker = serializers.CharField()
    worker = serializers.CharField(help_text="A confirm consumer was alive within the last seconds.")
    beat = serializers.CharField(help_text="The sweeps ran within three of their intervals.")
