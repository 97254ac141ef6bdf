"""How a run is judged: every unit and order of each SKU in both stores once
the backlog drained and reconciliation ran twice; ok only with nothing lost,
oversold, FAILED after its 202 or ordered twice for one key, no drift, and
after a Redis loss every SKU selling again."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC

from benchmarks.chaos.context import Context
from benchmarks.chaos.pause import answer_of
from benchmarks.chaos.report import Row
from benchmarks.chaos.sale import Sale


@dataclass
class Balance:
    """One SKU's figures in both stores, and what they say about the promise."""

    sku: str
    stock: int
    accepted: int
    confirmed: int = 0        # accepted and an order in MySQL, not FAILED
    failed_after_202: int = 0
    lost: int = 0             # accepted, no order at all
    duplicated: int = 0       # orders with no 202 behind them (or two for one key)
    oversold: int = 0
    drift: int | None = None  # Redis available - what MySQL implies, after settling
    balanced: bool = True
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return (self.balanced and self.lost == 0 and self.oversold == 0 and self.duplicated == 0
                and self.drift in (0, None))


def balance(sku_id: str, stock: int, accepted: set[str]) -> Balance:
    """Every unit and order of a SKU in both stores."""
    from django.db.models import Sum

    from inventory.models import Sku
    from inventory.redis import live as redis_live
    from orders.models import Order

    sku = Sku.objects.get(pk=sku_id)
    rows = dict(Order.objects.filter(sku_id=sku_id).values_list("order_id", "status"))
    live = redis_live.live_stock(sku_id=sku_id)
    kept = {oid for oid, st in rows.items() if st != "FAILED"}
    held = Order.objects.filter(sku_id=sku_id, status__in=["PENDING_PAYMENT", "PAID"]).aggregate(
        n=Sum("quantity"))["n"] or 0
    b = Balance(sku=sku_id, stock=stock, accepted=len(accepted))
    b.confirmed = len(kept & accepted)
    b.failed_after_202 = sum(1 for oid in accepted if rows.get(oid) == "FAILED")
    b.lost = len(accepted - set(rows))
    b.duplicated = len(kept - accepted)
    # Units orders hold beyond what the SKU can sell, or beyond what its buckets hold.
    b.oversold = max(0, held - (sku.total_stock - sku.frozen_stock)) + max(0, held - sku.locked_stock - sku.sold_stock)
    b.balanced = sku.total_stock == sku.available_stock + sku.frozen_stock + sku.locked_stock + sku.sold_stock
    if live is not None:
        b.drift = live.available - (sku.available_stock - live.inflight)
    b.extra = {"available": sku.available_stock, "locked": sku.locked_stock, "sold": sku.sold_stock,
               "redis_available": live.available if live else None, "in_flight": live.inflight if live else None}
    return b


def confirm_gap(skus: list[str], moments: list[float]) -> float | None:
    """Seconds from each fault to the first confirm of an order created after
    it (an order MySQL has as confirmed: confirmed_at set), the longest of the
    run's faults; None when no order was created after any of them."""
    from datetime import datetime

    from django.db.models import Min

    from orders.models import Order

    gaps = []
    for moment in moments:
        at = datetime.fromtimestamp(moment, tz=UTC)
        first = Order.objects.filter(sku_id__in=skus, created_at__gt=at, confirmed_at__isnull=False).aggregate(
            t=Min("confirmed_at"))["t"]
        if first is not None:
            gaps.append((first - at).total_seconds())
    return max(gaps) if gaps else None


def _accepted(row: Row, sale: Sale) -> dict[str, set[str]]:
    """The order ids of the 202s by SKU; attempted, accepted and duplicated (a
    key answered with two orders) into the row."""
    by_click: dict[tuple[str, str], set[str]] = {}
    accepted_of: dict[str, set[str]] = {sku: set() for sku in sale.ctx.skus}
    for r in sale.results:
        if r.status == 202:
            order_id = answer_of(r)["order_id"]
            by_click.setdefault(sale.jobs[r.index][:2], set()).add(order_id)
            accepted_of[sale.jobs[r.index][2]].add(order_id)
    row.attempted, row.accepted = len(sale.results), len(set().union(*accepted_of.values()))
    row.duplicated = sum(1 for ids in by_click.values() if len(ids) > 1)
    return accepted_of


def _wait_drained(skus: list[str], accepted: set[str], timeout: float = 180) -> None:
    """Until nothing is in flight on the SKUs and every 202 is an order in MySQL (or `timeout`)."""
    from django.db import close_old_connections

    from core.redis.errors import RedisError
    from inventory.redis import gate
    from orders.models import Order

    def drained() -> bool:
        close_old_connections()
        try:
            if any(gate.inflight_entries(sku_id=sku) for sku in skus):
                return False
        except RedisError:
            return False
        return Order.objects.filter(pk__in=accepted).count() == len(accepted)

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not drained():
        time.sleep(0.2)


def _reconcile(skus: list[str]) -> None:
    """Reconciliation of the SKUs, twice (each waits its turn: one run at a
    time; a run killed with its worker holds the lease until it expires)."""
    from reconciliation.lease import LEASE_SECONDS, ReconciliationBusy
    from reconciliation.services import reconciliation_run

    for _ in range(2):
        deadline = time.monotonic() + LEASE_SECONDS + 30
        while True:
            try:
                reconciliation_run(trigger="command", observe_gap_s=0.2, sku_ids=skus)
                break
            except ReconciliationBusy:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)


def judge(row: Row, sale: Sale, stock: int, drained_from: float) -> list[Balance]:
    """The run's figures into its row, once the backlog drained (drain_s from
    `drained_from`, the monotonic moment the last fault was over) and
    reconciliation ran; each SKU's balance."""
    ctx, skus = sale.ctx, sale.ctx.skus
    accepted_of = _accepted(row, sale)
    _wait_drained(skus, set().union(*accepted_of.values()))
    row.drain_s = time.monotonic() - drained_from
    _reconcile(skus)
    balances = [balance(sku, stock, accepted_of[sku]) for sku in skus]
    row.confirmed = sum(b.confirmed for b in balances)
    row.failed202 = sum(b.failed_after_202 for b in balances)
    row.lost = sum(b.lost for b in balances)
    row.oversold = sum(b.oversold for b in balances)
    drifts = [b.drift for b in balances if b.drift is not None]
    row.drift = (drifts[0] if len(skus) == 1 else sum(abs(d) for d in drifts)) if drifts else None
    # (Orders with no 202 behind them are requests interrupted by a kill: their
    # clients got no answer, a retry with the key gets the order. Not duplicates.)
    if ctx.inflight_at_loss:
        row.in_flight = "/".join(str(n) for n in ctx.inflight_at_loss)
    # (a fault that landed once the load was over, after a slow one, has no clicks behind it:
    # its "next order" would be the second wave's, whenever that came)
    row.confirm_gap_s = confirm_gap(skus, [t for t in ctx.struck if t < sale.load_over])
    return balances


def _noted(row: Row, note: str) -> None:
    row.note = "; ".join(filter(None, (row.note, note)))


def verdict(row: Row, ctx: Context, balances: list[Balance], results: list, left: str) -> None:
    """ok or not, and the notes. Redis loss or not: nothing fails after its 202
    and no key gets two orders; after a loss each SKU must sell again by itself
    (or answer sold out from its rebuilt snapshot). `left`: what the heal after
    the run could not mend (the next run would start on it)."""
    row.redis_loss = ctx.redis_loss
    sells_again = not ctx.losses or "none within" not in row.note
    balanced = all(b.balanced for b in balances)
    row.ok = (balanced and row.lost == 0 and row.oversold == 0 and row.drift in (0, None)
              and row.failed202 == 0 and row.duplicated == 0 and sells_again)
    if not balanced:
        row.note = "; ".join(filter(None, ("buckets do not add up", row.note)))
    for b in balances:  # what a drift is made of, to read it back
        if b.drift not in (0, None):
            _noted(row, f"drift {b.drift:+d} on {b.sku}: {b.extra}")
    n500 = sum(1 for r in results if r.status == 500)
    if n500:  # no promise broken (no 202), but no answer the API documents either: see the web log
        _noted(row, f"{n500} answered 500")
    n502 = sum(1 for r in results if r.status in (502, 504))
    if n502:  # HAProxy's answer to a request whose instance died under it (outcome unknown: retry with the key)
        _noted(row, f"{n502} answered 502/504 by the proxy")
    if left:
        row.ok = False
        _noted(row, left)
