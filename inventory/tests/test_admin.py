"""The ops console: stock actions through the services, validation, permissions."""
from __future__ import annotations

import threading
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client

from conftest import unique, wait_until, assert_balanced, settled, gives_applied
from inventory import redis_store
from inventory.services import stock as services
from core.errors import StockActionRefused
from inventory.models import InventoryLog, Sku


def staff(group: str | None, superuser: bool = False) -> tuple[object, Client]:
    User = get_user_model()
    user = User.objects.create_user(username=unique(group or "root"), password="pw", is_staff=True,
                                    is_superuser=superuser)
    if group:
        user.groups.add(Group.objects.get(name=group))
    client = Client()
    client.force_login(user)
    return user, client


def test_freeze_larger_than_redis_is_refused_and_changes_nothing(make_sku, live_db):
    sku = make_sku(stock=5)
    redis_store.reserve(sku_id=sku.sku_id, user_id=1, quantity=1, idempotency_key="k", order_id=uuid.uuid4().hex)
    with pytest.raises(StockActionRefused):
        services.stock_freeze(sku_id=sku.sku_id, quantity=5, reason="too many", actor="t")
    row = Sku.objects.get(pk=sku.sku_id)
    assert (row.available_stock, row.frozen_stock) == (5, 0)
    live = redis_store.live_stock(sku_id=sku.sku_id)
    assert (live.available, live.frozen) == (4, 0)
    # the attempt is audited, as refused
    assert list(InventoryLog.objects.filter(sku_id=sku.sku_id, operation="FREEZE").values_list("status", flat=True)) \
        == ["fail"]


@pytest.mark.worker
def test_freeze_unfreeze_write_off_restock_keep_both_stores_balanced(make_sku, worker, live_db):
    sku = make_sku(stock=20)
    services.stock_freeze(sku_id=sku.sku_id, quantity=8, reason="hold back", actor="ops")
    services.stock_unfreeze(sku_id=sku.sku_id, quantity=3, reason="release some", actor="ops")
    services.stock_write_off(sku_id=sku.sku_id, quantity=2, reason="damaged", actor="ops")
    services.stock_restock(sku_id=sku.sku_id, quantity=10, reason="new batch", actor="ops")
    with pytest.raises(StockActionRefused):
        services.stock_unfreeze(sku_id=sku.sku_id, quantity=4, reason="more than frozen", actor="ops")
    gives_applied(sku.sku_id)
    row = assert_balanced(sku.sku_id)
    assert (row.total_stock, row.available_stock, row.frozen_stock) == (28, 25, 3)
    live = redis_store.live_stock(sku_id=sku.sku_id)
    assert (live.total, live.frozen) == (28, 3)
    ops = list(InventoryLog.objects.filter(sku_id=sku.sku_id).exclude(operation="DECR")
               .order_by("id").values_list("operation", "quantity", "status", "actor"))
    assert ops == [("RESTOCK", 20, "success", ""), ("FREEZE", 8, "success", "ops"),
                   ("UNFREEZE", 3, "success", "ops"), ("WRITE_OFF", 2, "success", "ops"),
                   ("RESTOCK", 10, "success", "ops")]


@pytest.mark.worker
@pytest.mark.web
def test_freeze_during_a_running_sale_never_goes_below_zero(web, worker, make_sku, make_buyers):
    from orders.tests.test_concurrency import run_parallel

    sku = make_sku(stock=60, per_user_limit=1)
    buyers = make_buyers(120)
    jobs = [(token, sku.sku_id, 1, uuid.uuid4().hex) for _, token in buyers]
    frozen, refused = [], []

    def freezer():
        from django.db import connection

        try:
            for _ in range(10):
                try:
                    services.stock_freeze(sku_id=sku.sku_id, quantity=3, reason="mid-sale", actor="ops")
                    frozen.append(3)
                except StockActionRefused:
                    refused.append(3)
        finally:
            connection.close()

    t = threading.Thread(target=freezer)
    t.start()
    results = run_parallel(web.port, jobs, threads=24)
    t.join()
    sold = [s for s, _ in results].count(202)
    settled(sku.sku_id)
    row = assert_balanced(sku.sku_id)
    assert sold + sum(frozen) <= 60
    assert row.frozen_stock == sum(frozen) and row.locked_stock == sold
    assert row.available_stock == 60 - sold - sum(frozen) >= 0
    assert redis_store.live_stock(sku_id=sku.sku_id).available >= 0


@pytest.mark.worker
def test_restock_is_buyable_at_once(api, make_sku, make_buyers, worker):
    sku = make_sku(stock=1)
    (_, a), (_, b) = make_buyers(2)
    assert api(a).post("/api/v1/orders", {"sku_id": sku.sku_id, "quantity": 1}, format="json",
                       HTTP_IDEMPOTENCY_KEY="1").status_code == 202
    assert api(b).post("/api/v1/orders", {"sku_id": sku.sku_id, "quantity": 1}, format="json",
                       HTTP_IDEMPOTENCY_KEY="2").json()["code"] == "sold_out"
    services.stock_restock(sku_id=sku.sku_id, quantity=5, reason="more", actor="ops")
    wait_until(lambda: api(b).post("/api/v1/orders", {"sku_id": sku.sku_id, "quantity": 1}, format="json",
                                   HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex).status_code == 202,
               what="restocked unit bought", timeout=5)


def test_sku_form_refuses_nonsense(live_db):
    _, client = staff(None, superuser=True)
    base = {"sku_id": unique("F"), "name": "x", "price": "1.00", "per_user_limit": "1", "status": "active",
            "initial_stock": "5", "sale_starts_at_0": "2030-01-02", "sale_starts_at_1": "10:00:00",
            "sale_ends_at_0": "2030-01-03", "sale_ends_at_1": "10:00:00"}
    for bad, field in [({"initial_stock": "-1"}, "initial_stock"), ({"per_user_limit": "0"}, "per_user_limit"),
                       ({"sale_ends_at_0": "2030-01-01"}, "sale_ends_at"), ({"price": "-2"}, "price")]:
        r = client.post("/admin/inventory/sku/add/", {**base, **bad})
        assert r.status_code == 200, bad  # the form again, with its error
        assert field in r.context["adminform"].form.errors, (bad, r.context["adminform"].form.errors)
        assert not Sku.objects.filter(pk=base["sku_id"]).exists()
    r = client.post("/admin/inventory/sku/add/", base)
    assert r.status_code == 302
    assert redis_store.live_stock(sku_id=base["sku_id"]).available == 5


def test_edit_updates_redis_sale_data_and_stock_is_not_editable(live_db, make_sku):
    sku = make_sku(stock=5, per_user_limit=1)
    _, client = staff("ops")
    page = client.get(f"/admin/inventory/sku/{sku.sku_id}/change/")
    assert page.status_code == 200
    assert "available_stock" not in page.context["adminform"].form.fields
    r = client.post(f"/admin/inventory/sku/{sku.sku_id}/change/", {
        "name": "renamed", "price": "3.00", "per_user_limit": "4", "status": "paused",
        "sale_starts_at_0": "2020-01-01", "sale_starts_at_1": "00:00:00", "sale_ends_at_0": "", "sale_ends_at_1": ""})
    assert r.status_code == 302, r.context["adminform"].form.errors if r.context else r
    raw = redis_store.redis().hmget(redis_store.sku_keys(sku.sku_id).stock, "limit", "status", "available")
    assert [v.decode() for v in raw] == ["4", "paused", "5"]
    assert Sku.objects.get(pk=sku.sku_id).available_stock == 5


def test_support_sees_but_cannot_act_ops_can(live_db, make_sku):
    sku = make_sku(stock=12)
    _, support = staff("support")
    _, ops = staff("ops")
    url = f"/admin/inventory/sku/{sku.sku_id}/stock/freeze/"
    assert support.get(f"/admin/inventory/sku/{sku.sku_id}/change/").status_code == 200
    assert support.post(url, {"quantity": 2, "reason": "x"}).status_code == 403
    assert support.get("/admin/inventory/inventorylog/").status_code == 200
    r = ops.post(url, {"quantity": 2, "reason": "launch hold"})
    assert r.status_code == 302
    assert Sku.objects.get(pk=sku.sku_id).frozen_stock == 2
    assert InventoryLog.objects.filter(sku_id=sku.sku_id, operation="FREEZE", actor__contains="ops").exists()
    dash = ops.get("/admin/dashboard/")
    assert dash.status_code == 200 and sku.sku_id.encode() in dash.content
    # the change is audited in the admin log
    from django.contrib.admin.models import LogEntry

    assert LogEntry.objects.filter(object_id=sku.sku_id, change_message__contains="freeze").exists()
    # a buyer (not staff) never reaches the admin
    User = get_user_model()
    plain = User.objects.create_user(username=unique("plain"), password="pw")
    c = Client()
    c.force_login(plain)
    assert c.get("/admin/inventory/sku/").status_code == 302
