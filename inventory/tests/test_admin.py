"""The ops console: stock actions through the admin, validation, permissions (the services
themselves: test_stock.py)."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client

from core.redis.connection import redis
from inventory.models import InventoryLog, Sku
from inventory.redis import keys as redis_keys, live as redis_live
from testsupport.factories import unique


def staff(group: str | None, superuser: bool = False) -> tuple[object, Client]:
    User = get_user_model()
    user = User.objects.create_user(username=unique(group or "root"), password="pw", is_staff=True,
                                    is_superuser=superuser)
    if group:
        user.groups.add(Group.objects.get(name=group))
    client = Client()
    client.force_login(user)
    return user, client


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
    assert redis_live.live_stock(sku_id=base["sku_id"]).available == 5


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
    raw = redis().hmget(redis_keys.sku_keys(sku.sku_id).stock, "limit", "status", "available")
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


def test_a_stock_action_done_in_chinese_is_named_by_its_label(live_db, make_sku):
    """The Chinese titles put their aside in a full-width parenthesis; the
    message names the action by its button label, in the admin's language."""
    from django.contrib.messages import get_messages
    from django.utils import translation

    sku = make_sku(stock=5)
    _, ops = staff("ops")
    with translation.override("en"):  # the request leaves its language active in this thread
        r = ops.post(f"/admin/inventory/sku/{sku.sku_id}/stock/freeze/", {"quantity": 2, "reason": "hold"},
                     HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert r.status_code == 302
    with translation.override("zh-hans"):
        expected = translation.gettext("%(action)s: %(quantity)s unit(s) of %(sku)s done.") % {
            "action": translation.gettext("Freeze"), "quantity": 2, "sku": sku.sku_id}
        assert translation.gettext("Freeze") != "Freeze"  # the catalogue is compiled
    assert [str(m) for m in get_messages(r.wsgi_request)] == [expected]
    assert "（" not in expected
