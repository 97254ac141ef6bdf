"""What a purchase request must carry: the one definition of its checks (the
serializer of orders.api.serializers only describes it for the schema)."""
from __future__ import annotations

from django.conf import settings
from rest_framework import exceptions

from core.errors import IdempotencyKeyRequired

SKU_ID_MAX = 64
KEY_MAX = 64


def order_input(data: object) -> tuple[str, int]:
    """(sku_id, quantity) of a purchase body, or 400 `invalid` with the errors
    per field."""
    if not isinstance(data, dict):
        raise exceptions.ValidationError({"non_field_errors": ["The body must be a JSON object."]})
    errors: dict[str, list[str]] = {}
    sku_id, quantity = data.get("sku_id"), data.get("quantity")
    if not isinstance(sku_id, str) or not sku_id:
        errors["sku_id"] = ["A non-empty string is required."]
    elif len(sku_id) > SKU_ID_MAX or not sku_id.isprintable() or sku_id != sku_id.strip():
        errors["sku_id"] = [f"At most {SKU_ID_MAX} printable characters, without surrounding spaces."]
    if isinstance(quantity, bool) or not isinstance(quantity, int):
        errors["quantity"] = ["A whole number is required."]
    elif not 1 <= quantity <= settings.SECKILL_MAX_QUANTITY:
        errors["quantity"] = [f"Between 1 and {settings.SECKILL_MAX_QUANTITY}."]
    if errors:
        raise exceptions.ValidationError(errors)
    return sku_id, quantity


def idempotency_key_of(meta: dict) -> str:
    key = meta.get("HTTP_IDEMPOTENCY_KEY")
    if key is None or not (1 <= len(key) <= KEY_MAX) or not key.isprintable():
        raise IdempotencyKeyRequired()
    return key


PAYMENT_ID_MAX = 128


def pay_input(data: object) -> str | None:
    """The optional `payment_id` of a pay body (a retried provider callback
    with the same id pays once), or 400 `invalid`."""
    if not isinstance(data, dict):
        raise exceptions.ValidationError({"non_field_errors": ["The body must be a JSON object."]})
    payment_id = data.get("payment_id")
    if payment_id is None:
        return None
    if not isinstance(payment_id, str) or not payment_id or len(payment_id) > PAYMENT_ID_MAX \
            or not payment_id.isprintable():
        raise exceptions.ValidationError(
            {"payment_id": [f"1 to {PAYMENT_ID_MAX} printable characters."]})
    return payment_id
