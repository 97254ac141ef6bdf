"""The live sale view's JSON (/admin/dashboard/data.json): who may read it, and
that its figures are the stores' own (its reads themselves: test_selectors.py)."""
from __future__ import annotations

import time

from django.test import Client

from core.redis.connection import redis
from inventory.models import DeadLetter, Sku
from inventory.redis import keys as redis_keys, live as redis_live
from orders.models import Order
from testsupport import wait_until
from testsupport.factories import make_staff, unique
from testsupport.purchase import fence_reached, publish, reserve_direct

URL = "/admin/dashboard/data.json"


def _client(username: str, password: str = "") -> Client:
    from django.contrib.auth import get_user_model

    c = Client()
    c.force_login(get_user_model().objects.get(username=username))
    return c


def _sku_entry(body: dict, sku_id: str) -> dict:
    found = [s for s in body["skus"] if s["sku_id"] == sku_id]
    assert found, f"{sku_id} not on the live view"
    return found[0]


def test_only_staff_with_view_permission_read_the_json(live_db, make_sku):
    from django.contrib.auth import get_user_model

    make_sku(stock=3)
    anonymous = Client().get(URL)
    assert anonymous.status_code == 302 and "/admin/login/" in anonymous.url
    User = get_user_model()
    buyer = User.objects.create_user(username=unique("plain"), password="pw")
    r = _client(buyer.username, "pw").get(URL)
    assert r.status_code == 302 and "/admin/login/" in r.url  # a buyer is not staff
    bare = User.objects.create_user(username=unique("bare"), password="pw", is_staff=True)
    assert _client(bare.username, "pw").get(URL).status_code == 403  # staff, but may not view stock
    r = _client(*make_staff("support")).get(URL)
    assert r.status_code == 200 and r["Content-Type"] == "application/json"
    assert {"generated_at", "now_ms", "queue_depth", "dead_letters", "skus"} <= set(r.json())
    page = _client(*make_staff("support")).get("/admin/dashboard/")
    assert page.status_code == 200 and b"reconciliation/live.js" in page.content and URL.encode() in page.content


def test_figures_match_mysql_and_redis_after_reservations(live_db, make_sku, make_buyers, worker):
    sku = make_sku(stock=20, per_user_limit=2, name="live figures")
    buyers = make_buyers(3)
    held = [reserve_direct(sku.sku_id, user.pk) for user, _ in buyers]
    time.sleep(0.3)
    client = _client(*make_staff("support"))

    body = client.get(URL).json()
    row = _sku_entry(body, sku.sku_id)
    assert row["buckets"] == {"total": 20, "available": 20, "frozen": 0, "locked": 0, "sold": 0}
    assert row["redis_available"] == redis_live.live_stock(sku_id=sku.sku_id).available == 17
    assert row["in_flight"] == 3 and row["taken"] == 3
    oldest = min(r.reserved_ms for r in held)
    assert row["confirm_lag_exact"] and row["confirm_lag_ms"] == body["now_ms"] - oldest >= 300
    assert row["sale_state"] == "on_sale" and row["drift"] is None
    assert body["dead_letters"] == DeadLetter.objects.filter(status=DeadLetter.Status.OPEN).count()
    assert body["queue_depth"] is None or body["queue_depth"] >= 0

    # The worker confirms one: an order now, one reservation fewer in flight, the
    # same number taken (the figure the page turns into clicks per second).
    publish(held[0])
    wait_until(lambda: Order.objects.filter(pk=held[0].order_id).exists(), what="order confirmed")
    wait_until(lambda: _sku_entry(client.get(URL).json(), sku.sku_id)["in_flight"] == 2, what="settled")
    row = _sku_entry(client.get(URL).json(), sku.sku_id)
    mysql = Sku.objects.get(pk=sku.sku_id)
    assert row["buckets"] == {"total": 20, "available": mysql.available_stock, "frozen": 0,
                              "locked": mysql.locked_stock, "sold": 0}
    assert (mysql.available_stock, mysql.locked_stock) == (19, 1)
    assert row["orders"]["PENDING_PAYMENT"] == 1 and row["taken"] == 3
    assert row["confirm_lag_ms"] >= 0 and row["redis_available"] == 17


def test_a_sku_whose_rebuild_is_fenced_shows_as_rebuilding(live_db, make_sku):
    from inventory.services.snapshots import Warm, stock_warm

    sku = make_sku(stock=6)
    redis().delete(redis_keys.sku_keys(sku.sku_id).stock)  # Redis lost it
    assert stock_warm(sku_id=sku.sku_id) is Warm.FENCED
    c = _client(*make_staff("support"))
    entry = _sku_entry(c.get(URL).json(), sku.sku_id)
    assert (entry["sale_state"], entry["redis_available"]) == ("rebuilding", None)
    fence_reached(sku.sku_id)
    entry = _sku_entry(c.get(URL).json(), sku.sku_id)
    assert (entry["sale_state"], entry["redis_available"]) == ("on_sale", 6)
