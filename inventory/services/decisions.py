"""The decision about each reservation the gate accepted: confirmed, refused
(its unit dropped, or returned to sale) or undone. The one writer of
`ReservationDecision`.

A decision is written once and never rewritten: its order id is unique, so of
the confirm, an undo at the request and a refused dead-letter replay, the
first to commit decides and every later writer is told what was decided. The
confirm writes its decisions in its own transaction, in bulk, before it moves
any stock, so it never moves stock for a reservation decided otherwise.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from core import db
from inventory import selectors
from inventory.domain import Reservation
from inventory.models import ReservationDecision
from inventory.services.stock import SaleLogRow, stock_sale_log

Outcome = ReservationDecision.Outcome

_INSERT = db.Insert(ReservationDecision, ("order_id", "sku", "outcome", "reason", "actor", "decided_at"))


@dataclass(frozen=True)
class DecisionRecord:
    order_id: str
    sku_id: str
    outcome: Outcome
    reason: str = ""
    actor: str = ""


def reservation_decisions_record(*, decisions: Sequence[DecisionRecord], now: datetime | None = None
                                 ) -> dict[str, str]:
    """Write these decisions, all or none (one INSERT). Returns {} when they
    were all written: this caller decided them. Otherwise nothing was written,
    and the answer holds the outcome of each one decided before (by another
    writer, committed: MySQL reads committed rows), for the caller to follow."""
    if not decisions:
        return {}
    now = now or timezone.now()
    try:
        with transaction.atomic():  # a savepoint: a lost race leaves the caller's transaction usable
            _INSERT.run({"order_id": d.order_id, "sku": d.sku_id, "outcome": d.outcome, "reason": d.reason[:255],
                         "actor": d.actor[:150], "decided_at": now} for d in decisions)
    except IntegrityError:
        earlier = selectors.reservation_decisions(order_ids=[d.order_id for d in decisions])
        if not earlier:
            raise  # another constraint (an unknown SKU): no race, the caller's fault
        return earlier
    return {}


def reservation_undo_record(*, reservation: Reservation, reason: str, actor: str) -> str | None:
    """Decide a reservation undone: it never becomes an order, and a copy of
    its confirm delivered later is returned instead. Used by the undo of a
    reservation whose publish failed and by a dead-letter replay that cannot
    honour one. Returns None when this call decided it, or the outcome decided
    before (the confirm may have won: the order exists).

    The winner also writes the reservation's sale log row as `fail`, for the
    audit: an order id looked up in the inventory log then tells what became
    of every reservation MySQL heard of, and a replay's refusal keeps the name
    of who made it. Nothing reads that row to decide."""
    r = reservation
    with transaction.atomic():
        earlier = reservation_decisions_record(decisions=[
            DecisionRecord(r.order_id, r.sku_id, Outcome.UNDONE, reason=reason, actor=actor)])
        if earlier:
            return earlier[r.order_id]
        stock_sale_log(sku_id=r.sku_id, rows=[SaleLogRow(r.order_id, r.quantity, ok=False, reason=reason,
                                                         actor=actor)], now=timezone.now())
    return None
