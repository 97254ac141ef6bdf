"""The orders API, declared once (core.api): every operation's path, headers,
body and answers with their codes. orders.api.input checks requests through
these declarations and /api/schema/ is rendered from them."""
from __future__ import annotations

from django.conf import settings

from core.api import (
    BODY_ANSWERS,
    MAYBE_MOMENT,
    MOMENT,
    MONEY_PATTERN,
    PAGE,
    RETRY_AFTER,
    UNAUTHENTICATED,
    UNAVAILABLE,
    Answer,
    Body,
    Field,
    Money,
    Operation,
    Param,
    Text,
    Whole,
    ascii_pattern,
    merge_answers,
    refusal,
    text_pattern,
    throttled,
)
from core.errors import (
    AlreadyPaid,
    BadSignature,
    IdempotencyKeyInvalid,
    IdempotencyKeyRequired,
    IdempotencyKeyReused,
    LimitReached,
    NotCancellable,
    NotPayable,
    NotYet,
    OrderNotFound,
    PaymentByProvider,
    PaymentIdReused,
    SaleNotActive,
    SkuNotFound,
    SoldOut,
)
from inventory.api.declarations import SKU_ID, SKU_ID_MAX  # noqa: F401  (SKU_ID_MAX: by name, for others)
from orders.models import Order, PaymentRefund

KEY_MAX = 64
PAYMENT_ID_MAX = 128
ORDER_ID_PATTERN = "^[0-9a-f]{32}$"

QUANTITY = Whole(1, settings.SECKILL_MAX_QUANTITY, example=1)
PAYMENT_ID = Text(PAYMENT_ID_MAX, text_pattern(PAYMENT_ID_MAX), nullable=True,
                  description="The payment provider's id. The same id again (or none) on a paid order is harmless; "
                              "another id is 409 already_paid; an id that paid another order is 409 "
                              "payment_id_reused.")
IDEMPOTENCY_KEY = Param(
    "Idempotency-Key", "header", Text(KEY_MAX, ascii_pattern(KEY_MAX)),
    description="Opaque and case-sensitive, scoped to the user across SKUs: the same key again returns the same "
                "order (422 with another body). Only a request that took stock claims it. Absent: 400 "
                "idempotency_key_required; present but empty, over 64 characters or with a character outside "
                "visible ASCII (spaces inside only): 400 idempotency_key_invalid, the detail says which.")
ORDER_ID = Param("order_id", "path", Text(32, ORDER_ID_PATTERN, min_length=32),
                 description="Any other value is 404 not_found.")

PURCHASE_BODY = Body((Field("sku_id", SKU_ID), Field("quantity", QUANTITY)))
PAY_BODY = Body((Field("payment_id", PAYMENT_ID, required=False),), required=False,
                description="Optional: an empty body pays without a payment id.")
# Any id the provider names is recorded (as a refund to make when it names no
# payable order), so the webhook takes more than the ids this server issues.
CURRENCY_PATTERN = "^[A-Za-z]{3}$"
WEBHOOK_BODY = Body((Field("order_id", Text(64, text_pattern(64))),
                     Field("payment_id", Text(PAYMENT_ID_MAX, text_pattern(PAYMENT_ID_MAX))),
                     Field("status", Text(8, "^captured$", enum=("captured",))),
                     Field("amount", Money(description="What the provider captured, as the order's `amount` "
                                                       "reads (\"199.00\"); any other amount pays nothing "
                                                       "and is recorded as a refund to make.", example="199.00")),
                     Field("currency", Text(3, CURRENCY_PATTERN, min_length=3, example="CNY",
                                            description="ISO 4217 (any case); another currency than the "
                                                        "order's pays nothing (a refund to make)."))))

# --- bodies of the answers --------------------------------------------------------

_STATUS = {"type": "string", "enum": list(Order.Status.values)}

COMPONENTS = {
    "Order": {
        "type": "object",
        "required": ["order_id", "sku_id", "quantity", "status", "created_at", "expires_at", "confirmed_at",
                     "paid_at", "closed_at", "failure_reason", "amount", "currency"],
        "properties": {
            "order_id": {"type": "string", "pattern": ORDER_ID_PATTERN}, "sku_id": {"type": "string"},
            "quantity": {"type": "integer"}, "status": _STATUS, "created_at": MOMENT,
            "expires_at": {**MAYBE_MOMENT, "description": "Null while PROCESSING."},
            "confirmed_at": MAYBE_MOMENT, "paid_at": MAYBE_MOMENT, "closed_at": MAYBE_MOMENT,
            "failure_reason": {"type": "string", "description": "Empty unless FAILED."},
            "amount": {"type": "string", "pattern": MONEY_PATTERN, "nullable": True,
                       "description": "What the order costs: its unit price at the click times its quantity, "
                                      "decimal text. Null only while PROCESSING for a reservation taken before "
                                      "the server kept prices."},
            "currency": {"type": "string", "pattern": "^[A-Z]{3}$", "description": "ISO 4217 (SECKILL_CURRENCY)."},
        },
    },
    "OrderAccepted": {
        "type": "object",
        "required": ["order_id", "status", "sku_id", "quantity", "created_at", "replayed"],
        "properties": {
            "order_id": {"type": "string", "pattern": ORDER_ID_PATTERN},
            "status": {**_STATUS, "description": "PROCESSING; a replayed key answers its order's status now."},
            "sku_id": {"type": "string"}, "quantity": {"type": "integer"},
            "created_at": {**MAYBE_MOMENT, "description": "Null only for a replay whose order cannot be read now."},
            "replayed": {"type": "boolean", "description": "True when the key had made this order before."},
        },
    },
    "BaselineAccepted": {
        "type": "object",
        "required": ["order_id", "status", "sku_id", "quantity", "created_at"],
        "properties": {
            "order_id": {"type": "string", "enum": [""]}, "status": {"type": "string", "enum": ["VALIDATED"]},
            "sku_id": {"type": "string"}, "quantity": {"type": "integer"},
            "created_at": {"type": "string", "nullable": True, "enum": [None]},
        },
    },
    "OrderPage": {
        "type": "object",
        "required": ["count", "next", "previous", "results"],
        "properties": {
            "count": {"type": "integer", "minimum": 0, "description": "Orders in MySQL (not those PROCESSING)."},
            "next": {"type": "string", "nullable": True}, "previous": {"type": "string", "nullable": True},
            "results": {"type": "array", "items": {"$ref": "#/components/schemas/Order"},
                        "description": "Newest first; page 1 leads with the orders still PROCESSING."},
        },
    },
    "WebhookReceived": {
        "type": "object", "description": "Paid now, already paid, or recorded as a refund to make.",
        "required": ["order_id", "payment_id", "outcome", "status", "refund_reason"],
        "properties": {
            "order_id": {"type": "string"}, "payment_id": {"type": "string"},
            "outcome": {"type": "string", "enum": ["paid", "refund_recorded"]},
            "status": {**_STATUS, "nullable": True,
                       "description": "The order's status as the capture found it; null for an unknown order."},
            "refund_reason": {"type": "string", "nullable": True, "enum": [*PaymentRefund.Reason.values, None],
                              "description": "Why the capture is money to send back; null when it paid."},
        },
    },
}

_ORDER_LINKS = {202: {
    "GetOrder": {"operationId": "getOrder", "parameters": {"order_id": "$response.body#/order_id"}},
    "PayOrder": {"operationId": "payOrder", "parameters": {"order_id": "$response.body#/order_id"}},
    "CancelOrder": {"operationId": "cancelOrder", "parameters": {"order_id": "$response.body#/order_id"}},
}}
_NOT_FOUND = refusal(OrderNotFound, description="No such order of this user (also another user's, or a malformed "
                                                "id).")
# Each call spends from one of the user's budgets, in the round trip that
# authenticates its token (accounts.authentication).
PURCHASE_AUTH = (UNAUTHENTICATED, throttled("purchases (SECKILL_THROTTLE_RATE)"))
ORDER_CALL_AUTH = (UNAUTHENTICATED, throttled("order calls, pay, cancel, list and detail together "
                                              "(SECKILL_ORDER_CALLS_RATE)"))
_KEY_REFUSED = Answer(400, "No Idempotency-Key (idempotency_key_required), or one that cannot be a key "
                           "(idempotency_key_invalid: the detail says what is wrong with it).",
                      codes=(IdempotencyKeyRequired.code, IdempotencyKeyInvalid.code))

PLACE = Operation(
    "placeOrder", "POST", "orders", "Buy: take stock in the Redis gate, confirm in MySQL later",
    params=(IDEMPOTENCY_KEY,), body=PURCHASE_BODY, tags=("orders",), links=_ORDER_LINKS,
    answers=merge_answers(
        Answer(202, "Taken (or what this key made before).", "OrderAccepted"), *BODY_ANSWERS, _KEY_REFUSED,
        *PURCHASE_AUTH, *refusal(SkuNotFound, SoldOut, LimitReached, SaleNotActive, IdempotencyKeyReused),
        UNAVAILABLE))
BASELINE = Operation(
    "baseline", "POST", "baseline", "Everything a purchase does before the take, then 202 VALIDATED (benchmark)",
    params=(IDEMPOTENCY_KEY,), body=PURCHASE_BODY, tags=("orders",),
    answers=merge_answers(Answer(202, "Valid; nothing taken.", "BaselineAccepted"), *BODY_ANSWERS, _KEY_REFUSED,
                          *PURCHASE_AUTH, UNAVAILABLE))
LIST = Operation(
    "listOrders", "GET", "orders", "The caller's orders, newest first, 20 a page", params=(PAGE,), tags=("orders",),
    answers=merge_answers(Answer(200, "A page.", "OrderPage"), *ORDER_CALL_AUTH,
                          *refusal(OrderNotFound, description="No such page."), UNAVAILABLE))
DETAIL = Operation(
    "getOrder", "GET", "orders/{order_id}", "One of the caller's orders", params=(ORDER_ID,), tags=("orders",),
    answers=merge_answers(Answer(200, "The order.", "Order"), *ORDER_CALL_AUTH, *_NOT_FOUND, UNAVAILABLE))
PAY = Operation(
    "payOrder", "POST", "orders/{order_id}/pay", "PENDING_PAYMENT -> PAID (local demo, tests; SECKILL_BUYER_PAY)",
    params=(ORDER_ID,), body=PAY_BODY, tags=("orders",),
    answers=merge_answers(
        Answer(200, "Paid (also when it was, with the same payment id or none).", "Order"), *BODY_ANSWERS,
        *ORDER_CALL_AUTH, *_NOT_FOUND, *refusal(NotPayable, PaymentIdReused, AlreadyPaid, PaymentByProvider),
        UNAVAILABLE))
CANCEL = Operation(
    "cancelOrder", "POST", "orders/{order_id}/cancel", "PENDING_PAYMENT -> CANCELLED; the units go back",
    params=(ORDER_ID,), tags=("orders",), description="Reads no body.",
    answers=merge_answers(Answer(200, "Cancelled (also when it was).", "Order"), *ORDER_CALL_AUTH, *_NOT_FOUND,
                          *refusal(NotCancellable), UNAVAILABLE))
SIGNATURE = Param("Seckill-Signature", "header",
                  Text(560, "^t=[0-9]{1,12}(?:,v1=[0-9a-f]{64}){1,8}$", min_length=72),
                  description="`t=<unix seconds>,v1=<hex HMAC-SHA256 of \"<t>.<raw body>\" with "
                              "SECKILL_PAYMENT_WEBHOOK_SECRET>` (several v1 while a secret rotates: one must match). "
                              "Only a valid signature made within 5 minutes is accepted: 400 bad_signature "
                              "otherwise, and nothing changes.")
WEBHOOK = Operation(
    "paymentWebhook", "POST", "payments/webhook", "The payment provider's capture (signed, no token)",
    params=(SIGNATURE,), body=WEBHOOK_BODY, tags=("payments",), authenticated=False,
    description="Idempotent by payment id: a capture for an order that expired or was cancelled, a second "
                "capture with another payment id, or one whose amount or currency is not the order's, is 200 "
                "too and recorded as a refund to make. While SECKILL_PAYMENT_WEBHOOK_SECRET is unset the "
                "endpoint does not exist (404) and this schema leaves it out.",
    answers=merge_answers(
        Answer(200, "Paid now, already paid, or recorded as a refund to make.", "WebhookReceived"),
        *refusal(BadSignature), *BODY_ANSWERS,
        Answer(409, "The order is still in flight (202 given, not yet in MySQL): send the capture again after "
                    "Retry-After; nothing was recorded.", codes=(NotYet.code,), headers=(RETRY_AFTER,)),
        UNAVAILABLE))

OPERATIONS = (PLACE, BASELINE, LIST, DETAIL, PAY, CANCEL, WEBHOOK)


def operations_published() -> tuple[Operation, ...]:
    """The operations /api/schema/ shows: the webhook only while it exists."""
    return tuple(op for op in OPERATIONS if op is not WEBHOOK or settings.SECKILL_PAYMENT_WEBHOOK_SECRET)
