"""Domain errors: each carries its code, its HTTP status and its data. One DRF
exception handler (core.exception_handler) turns them into the
`{"code", "detail", ...data}` bodies of the contract (docs/contract.md), and
logs what they carry."""
from __future__ import annotations

from typing import Any


class DomainError(Exception):
    code = "error"
    http_status = 400
    message = "Request refused."
    # Seconds for a Retry-After header: the caller should come back then.
    retry_after: int | None = None

    def __init__(self, detail: str | None = None, **data: Any) -> None:
        self.detail = detail or self.message
        self.data = data
        super().__init__(self.detail)

    def extra(self) -> dict[str, Any]:
        """The error's data, beside `code` and `detail` in the response body."""
        return {k: v for k, v in self.data.items() if isinstance(v, (str, int, float, bool)) or v is None}


class SkuNotFound(DomainError):
    code, http_status, message = "sku_not_found", 404, "No such SKU."


class SoldOut(DomainError):
    code, http_status, message = "sold_out", 409, "Sold out."


class LimitReached(DomainError):
    code, http_status, message = "limit_reached", 409, "Per-user limit reached for this SKU."


class SaleNotActive(DomainError):
    code, http_status, message = "sale_not_active", 409, "The sale is not open."


class IdempotencyKeyRequired(DomainError):
    code, http_status, message = "idempotency_key_required", 400, "Header Idempotency-Key (1..64 chars) is required."


class IdempotencyKeyInvalid(DomainError):
    """An Idempotency-Key header that is there but cannot be a key; the detail
    names what is wrong with it (orders.api.input.key_problems)."""

    code, http_status, message = "idempotency_key_invalid", 400, "Header Idempotency-Key is not a valid key."


class IdempotencyKeyReused(DomainError):
    code, http_status, message = "idempotency_key_reused", 422, "This Idempotency-Key was used with a different body."


class InvalidInput(DomainError):
    code, http_status, message = "invalid", 400, "Invalid input."


class TooLarge(DomainError):
    code, http_status, message = "too_large", 413, "The request body is too large."


class Unavailable(DomainError):
    code, http_status, message = "unavailable", 503, "A backing service is unavailable; nothing was taken."


class OrderNotFound(DomainError):
    code, http_status, message = "not_found", 404, "Not found."


class NotPayable(DomainError):
    code, http_status, message = "not_payable", 409, "This order cannot be paid."


class NotCancellable(DomainError):
    code, http_status, message = "not_cancellable", 409, "This order cannot be cancelled."


class PaymentIdReused(DomainError):
    code, http_status, message = "payment_id_reused", 409, "This payment id already paid another order."


class StockRefused(DomainError):
    """MySQL refused a take: its conditional UPDATE found too little stock."""

    code, http_status, message = "insufficient_stock", 409, "Not enough stock in MySQL."


class StockActionRefused(DomainError):
    code, http_status, message = "stock_action_refused", 409, "The stock action was refused."


class AlreadyPaid(DomainError):
    code, http_status, message = "already_paid", 409, "This order is already paid by another payment."


class NotYet(DomainError):
    """A capture for an order the gate holds in flight: its confirm has not
    reached MySQL yet, so the provider is asked to send it again shortly."""

    code, http_status, message = "not_yet", 409, "The order is not confirmed yet; send the capture again shortly."
    retry_after = 1


class PaymentByProvider(DomainError):
    code, http_status, message = "payment_by_provider", 409, "Orders are paid through the payment provider only."


class BadSignature(DomainError):
    code, http_status, message = "bad_signature", 400, "The webhook signature is missing, wrong or too old."
