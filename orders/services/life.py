"""The order life after the confirm: pay, cancel, expire, and the bucket moves.

The one winner among pay, cancel and expiry is decided on the order row alone,
by a conditional UPDATE (`... WHERE status = 'PENDING_PAYMENT'`): no SKU row
lock, so payments never queue behind a hot row. What the decision means for the
SKU's buckets (locked -> sold, or locked -> available plus a give to Redis) is
applied later, in batches per SKU, by `order_moves_apply` (run by the mover in
the worker). Invariant at every instant, per SKU: `locked` = the units of its
orders whose `bucket` is locked (PENDING_PAYMENT, and PAID/CANCELLED/EXPIRED
orders whose move is not applied yet), `sold` = PAID orders applied, and the
CHECK total = available + frozen + locked + sold holds on the row.
"""
from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.utils import timezone

from core import db
from core.errors import AlreadyPaid, NotCancellable, NotPayable, OrderNotFound, PaymentIdReused
from core.retry import with_mysql_retry
from inventory.services.locks import skus_lock_nowait
from inventory.services.stock import GiveBack, Sale, stock_moves_apply
from orders import selectors
from orders.models import Order, PaymentRefund
from orders.selectors import VIEW_FIELDS, OrderView

logger = logging.getLogger(__name__)


@functools.cache
def _after_sql() -> str:
    """The order's view and the payment id it holds, in the one read a
    transition's outcome makes (compiled once, core.db)."""
    return (f"SELECT {', '.join(db.columns(Order, VIEW_FIELDS + ('payment_id',)))} FROM {db.table(Order)} "
            f"WHERE {db.columns(Order, ['order_id'])[0]} = %s AND {db.columns(Order, ['user'])[0]} = %s")


def _outcome(*, user_id: int, token: str | None, order_id: str, won: int, wanted: str,
             error: type[Exception], payment_id: str | None = None) -> OrderView:
    """The order after a transition: it moved (or was already where the caller
    wanted it: a harmless retry), or the refusal. An order still in flight
    exists but cannot move yet; an unknown one (or another user's) is 404. A
    paid order paid again with another payment id is a second capture: refused
    (409 already_paid), never answered as if it had paid."""
    row = db.fetch_one(_after_sql(), [order_id, user_id])
    if row is None:
        found = token is not None and selectors.order_get(user_id=user_id, token=token, order_id=order_id)
        raise error(status="PROCESSING") if found else OrderNotFound()
    order, paid_with = OrderView(*row[:-1]), row[-1]
    if won:
        return order
    if order.status == wanted:
        if payment_id and payment_id != paid_with:
            raise AlreadyPaid(payment_id=payment_id)
        return order
    raise error(status=order.status)


@functools.cache
def _sql(kind: str, *, with_payment_id: bool = False) -> str:
    """The conditional UPDATEs of pay and cancel, compiled once (core.db): the
    same statements the ORM would send, `... WHERE status = 'PENDING_PAYMENT'`."""
    sets = {"pay": ["status", "paid_at", "updated_at"] + (["payment_id"] if with_payment_id else []),
            "cancel": ["status", "closed_at", "updated_at"]}[kind]
    where = ["order_id", "user", "status"]
    sql = (f"UPDATE {db.table(Order)} SET {', '.join(f'{c} = %s' for c in db.columns(Order, sets))} "
           f"WHERE {' AND '.join(f'{c} = %s' for c in db.columns(Order, where))}")
    if kind == "pay":
        sql += f" AND {db.columns(Order, ['expires_at'])[0]} > %s"
    if with_payment_id:
        # A payment id recorded as a refund to make pays nothing. In the same
        # statement, a locking read of the refund's unique key: a refund of
        # this id being inserted meanwhile waits for this UPDATE, or it waits.
        sql += (f" AND NOT EXISTS (SELECT 1 FROM {db.table(PaymentRefund)} "
                f"WHERE {db.columns(PaymentRefund, ['payment_id'])[0]} = %s)")
    return sql


def order_pay(*, user_id: int, order_id: str, payment_id: str | None = None, token: str | None = None) -> OrderView:
    """PENDING_PAYMENT and not expired -> PAID, decided on the order row. Paying
    a paid order again with its own payment id (or none) answers the order
    (harmless: a provider's retried callback); with another payment id it is
    409 already_paid; a payment id already used by another order is refused."""
    now = timezone.now()
    try:
        won = with_mysql_retry(lambda: db.execute(_sql("pay", with_payment_id=bool(payment_id)), [
            Order.Status.PAID, now, now, *([payment_id] if payment_id else []),
            order_id, user_id, Order.Status.PENDING_PAYMENT, now, *([payment_id] if payment_id else [])]))
    except IntegrityError:
        raise PaymentIdReused(payment_id=payment_id) from None
    try:
        return _outcome(user_id=user_id, token=token, order_id=order_id, won=won, wanted=Order.Status.PAID,
                        error=NotPayable, payment_id=payment_id)
    except NotPayable as exc:
        if payment_id and exc.data.get("status") == Order.Status.PENDING_PAYMENT \
                and PaymentRefund.objects.filter(payment_id=payment_id).exists():
            raise PaymentIdReused(payment_id=payment_id) from None
        raise


def order_cancel(*, user_id: int, order_id: str, token: str | None = None) -> OrderView:
    """PENDING_PAYMENT -> CANCELLED by its owner, decided on the order row; the
    units go back when the move is applied (MySQL, then Redis through the
    outbox). Cancelling a cancelled order answers it again."""
    now = timezone.now()
    won = with_mysql_retry(lambda: db.execute(_sql("cancel"), [
        Order.Status.CANCELLED, now, now, order_id, user_id, Order.Status.PENDING_PAYMENT]))
    return _outcome(user_id=user_id, token=token, order_id=order_id, won=won, wanted=Order.Status.CANCELLED,
                    error=NotCancellable)


def orders_expire(*, limit: int = 500, sku_ids: list[str] | None = None) -> int:
    """Unpaid orders past their deadline -> EXPIRED, a batch at a time, each by
    the same conditional UPDATE a payment races with (one of them wins)."""
    now = timezone.now()
    due = Order.objects.filter(status=Order.Status.PENDING_PAYMENT, expires_at__lte=now)
    if sku_ids is not None:
        due = due.filter(sku_id__in=sku_ids)
    ids = list(due.order_by("expires_at").values_list("order_id", flat=True)[:limit])
    if not ids:
        return 0
    return with_mysql_retry(lambda: Order.objects.filter(
        pk__in=ids, status=Order.Status.PENDING_PAYMENT, expires_at__lte=now).update(
        status=Order.Status.EXPIRED, closed_at=now, updated_at=now))


# --- The bucket moves -------------------------------------------------------------------

@dataclass(frozen=True)
class MovesApplied:
    sku_id: str
    sold: int = 0
    given_back: int = 0
    busy: bool = False  # another mover holds the SKU row


def order_moves_apply(*, sku_id: str, limit: int = 2000) -> MovesApplied:
    """Apply the SKU's decided moves in one transaction: lock the SKU row
    (skipped if another mover holds it), take up to `limit` orders whose units
    still sit in `locked` although paid, cancelled or expired, move the buckets
    with one UPDATE, write their log rows and the gives' outbox rows, and set
    the orders' bucket. The order rows need no lock: a final status never
    changes again, and only a mover holding the SKU row writes `bucket`."""
    def apply() -> MovesApplied:
        with transaction.atomic(durable=True):
            sku = skus_lock_nowait(sku_id=sku_id)
            if sku is None:
                return MovesApplied(sku_id, busy=True)
            rows = list(Order.objects.filter(sku_id=sku_id, bucket=Order.Bucket.LOCKED,
                                             status__in=Order.MOVING_STATUSES)
                        .order_by("order_id").values_list("order_id", "status", "quantity", "user_id")[:limit])
            if not rows:
                return MovesApplied(sku_id)
            sold = [Sale(oid, qty) for oid, st, qty, _ in rows if st == Order.Status.PAID]
            given_back = [GiveBack(oid, qty, user, "cancelled by buyer" if st == Order.Status.CANCELLED
                                 else "payment window passed", f"user:{user}" if st == Order.Status.CANCELLED
                                 else "expiry") for oid, st, qty, user in rows if st != Order.Status.PAID]
            stock_moves_apply(sku=sku, sold=sold, given_back=given_back)
            now = timezone.now()
            if sold:
                Order.objects.filter(pk__in=[s.order_id for s in sold]).update(
                    bucket=Order.Bucket.SOLD, updated_at=now)
            if given_back:
                Order.objects.filter(pk__in=[r.order_id for r in given_back]).update(
                    bucket=Order.Bucket.AVAILABLE, updated_at=now)
            return MovesApplied(sku_id, len(sold), len(given_back))

    return with_mysql_retry(apply)
