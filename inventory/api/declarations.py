"""The inventory API, declared once (core.api): SKUs and health. The views
check their input through these declarations and /api/schema/ is rendered
from them."""
from __future__ import annotations

from core.api import (
    AUTH_ANSWERS,
    MAYBE_MOMENT,
    PAGE,
    UNAVAILABLE,
    Answer,
    Operation,
    Param,
    Text,
    merge_answers,
    refusal,
)
from core.errors import OrderNotFound, SkuNotFound
from inventory.domain import SKU_ID_MAX, SKU_ID_PATTERN
from inventory.health import HEALTH_PARTS
from inventory.models import Sku

# The one rule for a SKU id in a request, also the purchase body's
# (orders.api.declarations): the SKU-id alphabet of inventory.domain.
SKU_ID = Text(SKU_ID_MAX, SKU_ID_PATTERN, example="DEMO-PHONE",
              description="A SKU id: 1 to 64 characters of A-Z a-z 0-9 . _ - (the only ids a SKU is made with).")
SKU_PATH = Param("sku_id", "path", SKU_ID, description="Any other value is 404 sku_not_found.")

_BUCKETS = ("total", "available", "frozen", "locked", "sold")
_HEALTH_PROPS = {name: {"type": "string", "description": '"ok", or what failed.'} for name in HEALTH_PARTS}

COMPONENTS = {
    "Sku": {
        "type": "object",
        "required": ["sku_id", "name", "price", "available", "total", "per_user_limit", "sale_starts_at",
                     "sale_ends_at", "status", "sale_state"],
        "properties": {
            "sku_id": {"type": "string", "description": "Ids made before the SKU-id alphabet may be outside it."},
            "name": {"type": "string"},
            "price": {"type": "string", "description": "A decimal, e.g. \"999.00\"."},
            "available": {"type": "integer", "description": "The live figure of the Redis gate."},
            "total": {"type": "integer"}, "per_user_limit": {"type": "integer"},
            "sale_starts_at": MAYBE_MOMENT, "sale_ends_at": MAYBE_MOMENT,
            "status": {"type": "string", "enum": list(Sku.Status.values)},
            "sale_state": {"type": "string",
                           "enum": [s for s in dict.fromkeys(["on_sale", "sold_out", "upcoming", *Sku.Status.values])
                                    if s != Sku.Status.ACTIVE]},
            "buckets": {"type": "object", "description": "Staff only: the MySQL buckets.",
                        "required": list(_BUCKETS), "properties": {b: {"type": "integer"} for b in _BUCKETS}},
            "in_flight": {"type": "integer", "description": "Staff only: reserved in Redis, not yet confirmed."},
            "redis_warm": {"type": "boolean", "description": "Staff only: Redis holds the SKU's snapshot."},
        },
    },
    "SkuPage": {
        "type": "object",
        "required": ["count", "next", "previous", "results"],
        "properties": {"count": {"type": "integer", "minimum": 0}, "next": {"type": "string", "nullable": True},
                       "previous": {"type": "string", "nullable": True},
                       "results": {"type": "array", "items": {"$ref": "#/components/schemas/Sku"}}},
    },
    "Health": {"type": "object", "required": list(HEALTH_PARTS), "properties": _HEALTH_PROPS},
    "HealthRefused": {
        "type": "object", "required": ["code", "detail"],
        "properties": {"code": {"type": "string", "enum": ["unavailable"]}, "detail": {"type": "string"}},
    },
    "HealthFailing": {
        "type": "object", "required": [*HEALTH_PARTS, "code", "detail"],
        "properties": {**_HEALTH_PROPS, "code": {"type": "string", "enum": ["unavailable"]},
                       "detail": {"type": "string", "description": "failing: <the parts>"}},
    },
}

SKU_LIST = Operation(
    "listSkus", "GET", "skus", "The SKUs, by id, 20 a page", params=(PAGE,), tags=("skus",),
    answers=merge_answers(Answer(200, "A page.", "SkuPage"), *AUTH_ANSWERS,
                          *refusal(OrderNotFound, description="No such page."), UNAVAILABLE))
SKU_DETAIL = Operation(
    "getSku", "GET", "skus/{sku_id}", "One SKU with its live stock", params=(SKU_PATH,), tags=("skus",),
    answers=merge_answers(Answer(200, "The SKU.", "Sku"), *AUTH_ANSWERS, *refusal(SkuNotFound), UNAVAILABLE))
HEALTH = Operation(
    "health", "GET", "health", "Every store and process the API needs (no token)", authenticated=False,
    tags=("health",),
    answers=(Answer(200, "All ok.", "Health"),
             Answer(503, "A part is failing (the figures, and the failing parts in detail); or more health checks "
                         "than SECKILL_WEB_PROBE_SLOTS are running in this process, answered at once with the "
                         "bounded backlog's refusal (code unavailable, Retry-After: 1, no figures).",
                    {"anyOf": [{"$ref": "#/components/schemas/HealthFailing"},
                               {"$ref": "#/components/schemas/HealthRefused"}]},
                    headers=(("Retry-After", {"type": "integer", "minimum": 1,
                                              "description": "With the refusal only."}, False),))))

OPERATIONS = (SKU_LIST, SKU_DETAIL, HEALTH)
