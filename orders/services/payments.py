"""Payments from the provider: its signed capture callback mapped onto the
order's pay transition, and the refunds to make when the capture cannot pay.

The provider's payment id is the key of everything here. A capture pays the
order through `order_pay` (the same conditional UPDATE a buyer's cancel and the
expiry sweep race with: one of them wins, on the order row), and only when it
took exactly what the order costs (its amount and currency, recorded at the
reservation). When it cannot pay (another amount or currency, the order
expired, was cancelled or failed, another payment already paid it, another
order holds this payment id, or MySQL knows no such order) the money was still
taken by the provider: the capture is recorded as a PaymentRefund of what was
captured, once per payment id (a unique key), and the provider gets a 2xx so
it stops retrying. A refund record moves no bucket, so no unit is ever sold
twice, and a payment id recorded as a refund never pays any order.

An order the gate accepted (202) whose confirm has not reached MySQL yet is
not unknown: its capture is answered 409 not_yet with Retry-After and nothing
is recorded, so the provider's retry finds the order confirmed.

A retried callback is harmless either way: a capture already recorded as a
refund (same payment id, same order) answers that record again without trying
to pay, and one that paid its order answers the paid order (`order_pay` treats
its own payment id as a retry). A payment id that paid order A and is then
captured "for" order B is recorded against B (reason payment_id_reused), while
A's own retries still answer A's payment.
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import re
import time
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.errors import (
    AlreadyPaid,
    BadSignature,
    NotPayable,
    NotYet,
    PaymentByProvider,
    PaymentIdReused,
    Unavailable,
)
from core.metrics import payment_refund_counted
from core.redis.errors import RedisError
from core.retry import with_mysql_retry
from orders import selectors
from orders.models import Order, PaymentRefund
from orders.services.life import order_pay

logger = logging.getLogger(__name__)

# A signature older than this, or dated this far in the future, is refused:
# a captured request cannot be replayed later, and a provider's clock may be
# a little off either way.
SIGNATURE_TOLERANCE_SECONDS = 300
SIGNATURE_SCHEME = "v1"
_TIMESTAMP_RE = re.compile(r"^[0-9]{1,12}$")
_DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")


def buyer_pay_check() -> None:
    """The buyer's own POST pay is allowed unless SECKILL_BUYER_PAY is off,
    where only the provider's webhook may pay (409 payment_by_provider)."""
    if not settings.SECKILL_BUYER_PAY:
        raise PaymentByProvider()


def _digest(*, secret: str, timestamp: str, body: bytes) -> str:
    return hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def signature_make(*, secret: str, timestamp: int, body: bytes) -> str:
    """The `Seckill-Signature` header a provider sends with `body` at `timestamp`
    (unix seconds): `t=<timestamp>,v1=<hex HMAC-SHA256 of "<t>.<body>">`."""
    return f"t={timestamp},{SIGNATURE_SCHEME}={_digest(secret=secret, timestamp=str(timestamp), body=body)}"


def signature_verify(*, secret: str, header: str | None, body: bytes, now: float | None = None) -> None:
    """Accept `body` only with a `Seckill-Signature` made by `secret` over
    these very bytes within SIGNATURE_TOLERANCE_SECONDS of `now`; anything else
    (missing, malformed, wrong, too old or too new) is 400 bad_signature. More
    than one v1 value may be given (a provider rotating its secret): one must
    match. The comparison takes the same time whatever the digest given."""
    parts: dict[str, list[str]] = {}
    for item in (header or "").split(","):
        name, sep, value = item.strip().partition("=")
        if sep:
            parts.setdefault(name, []).append(value.strip().lower())
    stamps, given = parts.get("t", []), parts.get(SIGNATURE_SCHEME, [])
    if len(stamps) != 1 or not _TIMESTAMP_RE.match(stamps[0]) or not given \
            or not all(_DIGEST_RE.match(g) for g in given):
        raise BadSignature("The Seckill-Signature header is missing or malformed.")
    now = time.time() if now is None else now
    if abs(now - int(stamps[0])) > SIGNATURE_TOLERANCE_SECONDS:
        raise BadSignature("The signature's timestamp is too far from the server's clock.")
    expected = _digest(secret=secret, timestamp=stamps[0], body=body)
    # Every candidate is compared (no early exit), each in constant time.
    if not [g for g in given if hmac.compare_digest(expected, g)]:
        raise BadSignature()


@dataclass(frozen=True)
class Capture:
    """What a capture did: paid the order (now, or earlier with this same
    payment id), or was recorded as a refund to make (`refund_reason`)."""

    order_id: str
    payment_id: str
    order_status: str | None
    refund_reason: str | None = None

    @property
    def outcome(self) -> str:
        return "paid" if self.refund_reason is None else "refund_recorded"


_CLOSED_REASONS = {Order.Status.CANCELLED: PaymentRefund.Reason.ORDER_CANCELLED,
                   Order.Status.FAILED: PaymentRefund.Reason.ORDER_FAILED}


def payment_capture(*, order_id: str, payment_id: str, amount: Decimal, currency: str) -> Capture:
    """The provider captured `amount` in `currency` with `payment_id` for
    `order_id`: pay the order, or record the refund to make. Idempotent by
    payment id (see the module). An order the gate still holds in flight
    raises NotYet (the provider sends the capture again); Redis being away
    then raises Unavailable: neither records anything."""
    paid = Order.objects.filter(pk=order_id, payment_id=payment_id).values_list("status", flat=True).first()
    if paid is not None:
        # The capture that paid this order, retried (whatever came since).
        return Capture(order_id, payment_id, paid)
    recorded = PaymentRefund.objects.filter(payment_id=payment_id).values_list(
        "order_ref", "reason", "order_status").first()
    if recorded is not None:
        # A retry answers its record, without paying (the money is due back).
        # The same payment id named for another order pays nothing either: it
        # is one capture, already money to send back.
        ref, reason, status = recorded
        if ref == order_id:
            return Capture(order_id, payment_id, status or None, reason)
        return Capture(order_id, payment_id, None, PaymentRefund.Reason.PAYMENT_ID_REUSED)
    order = _order_of_capture(order_id)
    captured = {"amount": amount, "currency": currency}
    if order is None:
        return _refund_record(order_ref=order_id, payment_id=payment_id, reason=PaymentRefund.Reason.UNKNOWN_ORDER,
                              **captured)
    user_id, cost, order_currency, status = order
    if amount != cost or currency != order_currency:
        logger.warning("capture %s for order %s took %s %s; the order costs %s %s", payment_id, order_id,
                       amount, currency, cost, order_currency)
        return _refund_record(order_ref=order_id, payment_id=payment_id, reason=PaymentRefund.Reason.AMOUNT_MISMATCH,
                              order_status=status, order_pk=order_id, **captured)
    try:
        paid = order_pay(user_id=user_id, order_id=order_id, payment_id=payment_id)
    except AlreadyPaid:
        reason, status = PaymentRefund.Reason.SECOND_CAPTURE, Order.Status.PAID
    except PaymentIdReused:
        # The UPDATE matched (the order was payable), the unique key refused it.
        reason, status = PaymentRefund.Reason.PAYMENT_ID_REUSED, Order.Status.PENDING_PAYMENT
    except NotPayable as exc:
        # Expired, or still PENDING_PAYMENT past its window (the sweep is due).
        status = exc.data.get("status", "")
        reason = _CLOSED_REASONS.get(status, PaymentRefund.Reason.ORDER_EXPIRED)
    else:
        return Capture(order_id, payment_id, paid.status)
    return _refund_record(order_ref=order_id, payment_id=payment_id, reason=reason, order_status=status,
                          order_pk=order_id, **captured)


def _order_of_capture(order_id: str) -> tuple | None:
    """(user, amount, currency, status) of the order MySQL has. An order not
    there yet but held in flight by the gate is NotYet: its confirm is coming,
    and recording the capture as for an unknown order would lose the payment.
    MySQL is read again after Redis: the confirm commits, then settles Redis,
    and may have done both between the two reads."""
    def stored():
        return Order.objects.filter(pk=order_id).values_list("user_id", "amount", "currency", "status").first()

    order = stored()
    if order is not None:
        return order
    try:
        in_flight = selectors.order_in_flight(order_id=order_id)
    except RedisError:
        raise Unavailable() from None
    if in_flight is not None:
        raise NotYet(order_id=order_id)
    return stored()


def _refund_record(*, order_ref: str, payment_id: str, reason: str, amount: Decimal, currency: str,
                   order_status: str = "", order_pk: str | None = None) -> Capture:
    """Insert the refund to make, once: a concurrent copy of the same callback
    meets the unique payment id and answers the record the first one wrote."""
    def insert() -> None:
        with transaction.atomic():
            PaymentRefund.objects.create(payment_id=payment_id, order_id=order_pk, order_ref=order_ref,
                                         reason=reason, order_status=order_status, amount=amount,
                                         currency=currency)

    try:
        # sent again after a lost answer, the insert meets its own unique payment id
        with_mysql_retry(insert)
    except IntegrityError:
        reason, order_status = PaymentRefund.objects.filter(payment_id=payment_id).values_list(
            "reason", "order_status").get()
        return Capture(order_ref, payment_id, order_status or None, reason)
    payment_refund_counted(reason=reason)
    logger.warning("payment %s for order %s recorded as a refund to make: %s (order %s)",
                   payment_id, order_ref, reason, order_status or "unknown")
    return Capture(order_ref, payment_id, order_status or None, reason)


def refund_resolve(*, refund_id: int, status: str, actor: str, note: str = "") -> bool:
    """Close an open refund as refunded (the provider's refund is made) or
    dismissed (nothing to send back, with the reason in `note`). A conditional
    UPDATE: two people closing it at once close it once; False if it was
    already closed."""
    if status not in (PaymentRefund.Status.REFUNDED, PaymentRefund.Status.DISMISSED):
        raise ValueError(f"a refund is closed as refunded or dismissed, not {status!r}")
    return bool(PaymentRefund.objects.filter(pk=refund_id, status=PaymentRefund.Status.TO_REFUND).update(
        status=status, resolved_by=actor, resolved_at=timezone.now(), resolution_note=note))
