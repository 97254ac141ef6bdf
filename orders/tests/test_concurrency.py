"""Many concurrent buyers over real HTTP (the default web server) with a real worker."""
from __future__ import annotations

import uuid

import pytest

from inventory.models import InventoryLog
from orders.models import Order
from testsupport.http import run_parallel
from testsupport.stores import assert_balanced, decr_log_by_order, settled

pytestmark = [pytest.mark.worker, pytest.mark.web]


def test_500_buyers_on_50_units_sell_exactly_50(web, worker, make_sku, make_buyers):
    sku = make_sku(stock=50, per_user_limit=2)
    buyers = make_buyers(250)
    # every buyer tries twice with quantity 1 (allowed by the limit of 2) = 500 attempts
    jobs = [(token, sku.sku_id, 1, uuid.uuid4().hex) for _, token in buyers for _ in range(2)]
    results = run_parallel(web.port, jobs)
    statuses = [s for s, _ in results]
    assert len(results) == 500
    assert statuses.count(202) == 50, {s: statuses.count(s) for s in set(statuses)}
    assert set(statuses) <= {202, 409}
    assert {b["code"] for s, b in results if s == 409} <= {"sold_out", "limit_reached"}
    accepted = {b["order_id"] for s, b in results if s == 202}
    assert len(accepted) == 50

    settled(sku.sku_id)
    sku = assert_balanced(sku.sku_id)
    assert (sku.available_stock, sku.locked_stock, sku.sold_stock) == (0, 50, 0)
    orders = Order.objects.filter(sku_id=sku.sku_id)
    assert set(orders.values_list("order_id", flat=True)) == accepted
    assert set(orders.values_list("status", flat=True)) == {Order.Status.PENDING_PAYMENT}
    log = decr_log_by_order(sku.sku_id)
    assert set(log) == accepted and set(log.values()) == {InventoryLog.Status.PENDING}


def test_same_key_sent_concurrently_yields_one_order(web, worker, make_sku, make_buyers):
    sku = make_sku(stock=10, per_user_limit=5)
    (_, token), = make_buyers(1)
    results = run_parallel(web.port, [(token, sku.sku_id, 1, "one-key")] * 40, threads=20)
    assert {s for s, _ in results} == {202}, [b for s, b in results if s != 202]
    assert len({b["order_id"] for _, b in results}) == 1
    settled(sku.sku_id)
    sku = assert_balanced(sku.sku_id)
    assert (sku.available_stock, sku.locked_stock) == (9, 1)
    assert Order.objects.filter(sku_id=sku.sku_id).count() == 1


def test_per_user_limit_holds_under_concurrency(web, worker, make_sku, make_buyers):
    sku = make_sku(stock=100, per_user_limit=3)
    buyers = make_buyers(5)
    jobs = [(token, sku.sku_id, 1, uuid.uuid4().hex) for _, token in buyers for _ in range(12)]
    results = run_parallel(web.port, jobs, threads=24)
    assert [s for s, _ in results].count(202) == 15
    settled(sku.sku_id)
    assert_balanced(sku.sku_id)
    per_user = {}
    for o in Order.objects.filter(sku_id=sku.sku_id):
        per_user[o.user_id] = per_user.get(o.user_id, 0) + o.quantity
    assert sorted(per_user.values()) == [3] * 5
