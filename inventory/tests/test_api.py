"""SKU reads and health."""
from __future__ import annotations

from unittest import mock

from inventory import redis_store


def test_sku_detail_public_and_staff(api, make_sku, make_buyers):
    sku = make_sku(stock=7, per_user_limit=2, price="12.50")
    (_, buyer), = make_buyers(1)
    (_, staff), = make_buyers(1, staff=True)
    public = api(buyer).get(f"/api/v1/skus/{sku.sku_id}").json()
    assert public["available"] == 7 and public["total"] == 7 and public["per_user_limit"] == 2
    assert public["sale_state"] == "on_sale" and "buckets" not in public
    (user, _), = make_buyers(1)
    redis_store.reserve(sku_id=sku.sku_id, user_id=user.pk, quantity=2, idempotency_key="k", order_id="b" * 32)
    body = api(staff).get(f"/api/v1/skus/{sku.sku_id}").json()
    assert body["available"] == 5  # the live Redis figure
    assert body["buckets"] == {"total": 7, "available": 7, "frozen": 0, "locked": 0, "sold": 0}
    assert body["in_flight"] == 2


def test_sku_not_found_and_list(api, make_sku, make_buyers):
    sku = make_sku(stock=1)
    (_, buyer), = make_buyers(1)
    r = api(buyer).get("/api/v1/skus/NOPE-NOPE")
    assert r.status_code == 404 and r.json()["code"] == "sku_not_found"
    ids = []
    url = "/api/v1/skus"
    while url:
        page = api(buyer).get(url).json()
        ids += [s["sku_id"] for s in page["results"]]
        url = page["next"]
    assert sku.sku_id in ids


def test_sku_is_warmed_on_read_after_redis_lost_it(api, make_sku, make_buyers):
    sku = make_sku(stock=3)
    redis_store.redis().delete(redis_store.sku_keys(sku.sku_id).stock)
    (_, buyer), = make_buyers(1)
    assert api(buyer).get(f"/api/v1/skus/{sku.sku_id}").json()["available"] == 3
    assert redis_store.live_stock(sku_id=sku.sku_id).available == 3


def test_health_ok_and_names_the_failing_part(api, live_db):
    r = api().get("/api/v1/health")
    assert r.status_code == 200 and r.json() == {"mysql": "ok", "redis": "ok", "broker": "ok"}
    with mock.patch("inventory.redis_store.ping", side_effect=redis_store.RedisError("down")):
        r = api().get("/api/v1/health")
    assert r.status_code == 503
    assert r.json()["redis"] != "ok" and r.json()["mysql"] == "ok" and r.json()["code"] == "unavailable"


def test_schema_is_served(api, live_db):
    r = api().get("/api/schema/")
    assert r.status_code == 200
    assert b"/api/v1/orders" in r.content
