"""What a SKU looks like in an API answer (declared in inventory.api.declarations)."""
from __future__ import annotations

from rest_framework import serializers

from inventory.selectors import SkuView


def sku_output(view: SkuView, *, staff: bool) -> dict:
    sku = view.sku
    moment = serializers.DateTimeField().to_representation
    body = {
        "sku_id": sku.sku_id,
        "name": sku.name,
        "price": str(sku.price),
        "available": view.available,
        "total": sku.total_stock,
        "per_user_limit": sku.per_user_limit,
        "sale_starts_at": moment(sku.sale_starts_at) if sku.sale_starts_at else None,
        "sale_ends_at": moment(sku.sale_ends_at) if sku.sale_ends_at else None,
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

