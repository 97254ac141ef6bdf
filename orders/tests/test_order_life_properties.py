"""The order life as a state machine, explored by Hypothesis against the real
Redis and MariaDB.

The machine plays the broker: confirm and give messages it is handed are
delivered in any order, any number of times, or not yet; meanwhile buyers
reserve, pay and cancel, orders expire, ops freeze, unfreeze and restock,
reconciliation runs and Redis loses everything. After every step the
invariants hold: the buckets balance, nothing is oversold, an order leaves a
final state never, the log has one sale row per order, Redis is never above
the truth (a lost snapshot is rebuilt only when its fence passes, which the
broker delivers after every confirm it held at the loss), a 202 never ends
FAILED, and once everything is delivered and reconciled the two stores agree.
"""
from __future__ import annotations

import os
import uuid
from datetime import timedelta
from unittest import mock

from django.db.models import Sum
from django.utils import timezone
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from accounts import token_cache
from core.errors import DomainError
from core.redis.connection import redis
from inventory.domain import Reservation
from inventory.models import InventoryLog, Sku
from inventory.redis import gate, snapshots as redis_snapshots
from inventory.services import gives, stock
from orders.models import Order
from orders.services import confirm, life, place
from reconciliation import services as reconciliation
from testsupport.purchase import fence_reached

FINAL = {"PAID", "CANCELLED", "EXPIRED", "FAILED"}
STOCK, LIMIT = 6, 2


class OrderLife(RuleBasedStateMachine):
    users: list[tuple[int, str]] = []  # (user id, token), made once per test

    def __init__(self):
        super().__init__()
        self.sku_id = f"P-{uuid.uuid4().hex[:10]}"
        self.confirms: list[Reservation] = []  # messages the "broker" holds
        self.delivered: list[Reservation] = []
        self.gives: list[dict] = []
        self.gives_done: list[dict] = []
        self.accepted: set[str] = set()  # answered 202
        self.final: dict[str, str] = {}

    @initialize()
    def create_sku(self):
        from inventory.services.skus import sku_create

        sku_create(sku_id=self.sku_id, stock=STOCK, per_user_limit=LIMIT, actor="property")

    # --- the broker is this machine ----------------------------------------------------
    def _capture(self):
        return (mock.patch("inventory.messages.group_publisher.publish_confirm",
                           side_effect=lambda r, deadline: self.confirms.append(r)),
                mock.patch("inventory.messages.celery_sends.publish_gives",
                           side_effect=lambda ps: self.gives.extend(ps)))

    def _quietly(self, fn):
        a, b = self._capture()
        with a, b:
            try:
                return fn()
            except DomainError:
                return None

    # --- buyers ------------------------------------------------------------------------
    @rule(user=st.integers(0, 2), qty=st.integers(1, 2), key=st.sampled_from(["a", "b", "c", "A"]))
    def reserve(self, user, qty, key):
        user_id, token = self.users[user]
        key = f"{self.sku_id}:{key}"  # the buyers are shared by the examples; their keys are not
        prior = token_cache.authorize(token=token, idempotency_key=key).prior
        placed = self._quietly(lambda: place.order_place(user_id=user_id, token=token, sku_id=self.sku_id,
                                                         quantity=qty, idempotency_key=key, prior=prior))
        if placed is not None:
            self.accepted.add(placed.order_id)

    @precondition(lambda self: self.confirms)
    @rule(i=st.integers(0, 50), keep=st.booleans())
    def deliver_confirm(self, i, keep):
        r = self.confirms[i % len(self.confirms)]
        if not keep:  # acknowledged; `keep` leaves a copy to be delivered again
            self.confirms.remove(r)
        confirm.reservations_confirm(reservations=[r])
        self.delivered.append(r)

    @precondition(lambda self: self.delivered)
    @rule(i=st.integers(0, 50))
    def redeliver_confirm(self, i):
        confirm.reservations_confirm(reservations=[self.delivered[i % len(self.delivered)]])

    def _order(self, i, statuses):
        ids = list(Order.objects.filter(sku_id=self.sku_id, status__in=statuses).values_list("order_id", "user_id"))
        return ids[i % len(ids)] if ids else None

    @rule(i=st.integers(0, 50))
    def pay(self, i):
        found = self._order(i, ["PENDING_PAYMENT", "PAID", "CANCELLED"])
        if found:
            self._quietly(lambda: life.order_pay(user_id=found[1], order_id=found[0]))

    @rule(i=st.integers(0, 50))
    def cancel(self, i):
        found = self._order(i, ["PENDING_PAYMENT", "PAID", "CANCELLED"])
        if found:
            self._quietly(lambda: life.order_cancel(user_id=found[1], order_id=found[0]))

    @rule(i=st.integers(0, 50))
    def expire(self, i):
        found = self._order(i, ["PENDING_PAYMENT"])
        if found:
            Order.objects.filter(pk=found[0]).update(expires_at=timezone.now() - timedelta(seconds=1))
            self._quietly(lambda: life.orders_expire(sku_ids=[self.sku_id]))

    # --- ops ----------------------------------------------------------------------------
    @rule(qty=st.integers(1, 3))
    def freeze(self, qty):
        self._quietly(lambda: stock.stock_freeze(sku_id=self.sku_id, quantity=qty, reason="p", actor="p"))

    @rule(qty=st.integers(1, 3))
    def unfreeze(self, qty):
        self._quietly(lambda: stock.stock_unfreeze(sku_id=self.sku_id, quantity=qty, reason="p", actor="p"))

    @rule(qty=st.integers(1, 3))
    def restock(self, qty):
        self._quietly(lambda: stock.stock_restock(sku_id=self.sku_id, quantity=qty, reason="p", actor="p"))

    @rule()
    def apply_moves(self):
        """The mover: the decided pays, cancels and expiries reach the SKU row."""
        a, b = self._capture()
        with a, b:
            while True:
                done = life.order_moves_apply(sku_id=self.sku_id)
                if not done.sold + done.given_back:
                    break

    @precondition(lambda self: self.gives)
    @rule(i=st.integers(0, 50), keep=st.booleans())
    def deliver_give(self, i, keep):
        p = self.gives[i % len(self.gives)]
        try:
            gives.stock_gives_apply(gives=[p], wait_s=0)
        except gives.GiveDeferred:
            return  # no snapshot yet: it stays with the broker
        if not keep:
            self.gives.remove(p)
        self.gives_done.append(p)

    # --- the system's own repairs and faults ------------------------------------------------
    @rule()
    def reconcile(self):
        a, b = self._capture()
        with a, b:
            reconciliation.reconciliation_run(trigger="command", observe_gap_s=0, sku_ids=[self.sku_id])

    @rule()
    def redis_loses_everything(self):
        redis().flushdb()

    @precondition(lambda self: redis_snapshots.fence_token(sku_id=self.sku_id) is not None)
    @rule()
    def fence_reaches_the_consumer(self):
        """The broker delivers a fence after every confirm it held when the fence
        was sent (nothing can be reserved while the SKU is fenced)."""
        for r in list(self.confirms):
            confirm.reservations_confirm(reservations=[r])
            self.delivered.append(r)
        self.confirms.clear()
        fence_reached(self.sku_id)

    # --- invariants ---------------------------------------------------------------------------
    @invariant()
    def buckets_balance_and_nothing_is_oversold(self):
        if not hasattr(self, "sku_id") or not Sku.objects.filter(pk=self.sku_id).exists():
            return
        s = Sku.objects.get(pk=self.sku_id)
        assert s.total_stock == s.available_stock + s.frozen_stock + s.locked_stock + s.sold_stock
        assert min(s.available_stock, s.frozen_stock, s.locked_stock, s.sold_stock) >= 0

        def units(**kw) -> int:
            return Order.objects.filter(sku_id=self.sku_id, **kw).aggregate(n=Sum("quantity"))["n"] or 0

        # the buckets and the moves not yet applied balance: each order's units
        # are where its `bucket` says, whatever its status decided meanwhile
        assert units(bucket="locked") == s.locked_stock and units(bucket="sold") == s.sold_stock
        assert units(status__in=["PENDING_PAYMENT", "PAID"]) <= s.total_stock - s.frozen_stock

    @invariant()
    def an_order_leaves_a_final_state_never_and_has_one_sale_row(self):
        if not hasattr(self, "sku_id"):
            return
        for oid, status in Order.objects.filter(sku_id=self.sku_id).values_list("order_id", "status"):
            if oid in self.final:
                assert status == self.final[oid], (oid, self.final[oid], status)
            elif status in FINAL:
                self.final[oid] = status
        rows = list(InventoryLog.objects.filter(sku_id=self.sku_id, operation="DECR").values_list("order_id",
                                                                                                  flat=True))
        assert len(rows) == len(set(rows)) == Order.objects.filter(sku_id=self.sku_id).count()
        assert set(Order.objects.filter(sku_id=self.sku_id).values_list("order_id", flat=True)) <= self.accepted

    @invariant()
    def redis_is_never_above_the_truth(self):
        if not hasattr(self, "sku_id"):
            return
        m = reconciliation.sku_measure(sku_id=self.sku_id)
        if m is not None and not m.missing:
            assert m.drift <= 0, (m.redis_available, m.expected)

    def teardown(self):
        """Deliver everything, reconcile, and the stores agree."""
        if not hasattr(self, "sku_id"):
            return
        for r in list(self.confirms):
            confirm.reservations_confirm(reservations=[r])
        self.confirms.clear()
        self.apply_moves()
        a, b = self._capture()
        with a, b:
            reconciliation.reconciliation_run(trigger="command", observe_gap_s=0, sku_ids=[self.sku_id])
            if redis_snapshots.fence_token(sku_id=self.sku_id) is not None:
                self.fence_reaches_the_consumer()
            for _give in list(self.gives):  # the snapshot is there again: every give lands
                self.deliver_give(0, keep=False)
            for _ in range(2):
                reconciliation.reconciliation_run(trigger="command", observe_gap_s=0, sku_ids=[self.sku_id])
        # the settled stores: Redis equals MySQL (nothing is in flight any more)
        if not gate.inflight_entries(sku_id=self.sku_id) and not self.gives:
            m = reconciliation.sku_measure(sku_id=self.sku_id)
            assert m.drift == 0, (m.redis_available, m.expected, m.in_flight, m.gives_unapplied)
        # a 202 is an order, never FAILED, whatever Redis lost meanwhile
        statuses = dict(Order.objects.filter(pk__in=self.accepted).values_list("order_id", "status"))
        assert set(statuses) == self.accepted, self.accepted - set(statuses)
        assert "FAILED" not in statuses.values(), statuses


def test_order_life_state_machine(live_db, make_buyers, no_worker):
    OrderLife.users = [(u.pk, tok) for u, tok in make_buyers(3)]
    profile = os.environ.get("SECKILL_PROPERTY_EXAMPLES")
    run_state_machine_as_test(OrderLife, settings=settings(
        max_examples=int(profile or 12), stateful_step_count=30, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much], derandomize=not profile))
