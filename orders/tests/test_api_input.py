"""Bad input gets the 4xx and code of API.md, and takes nothing."""
from __future__ import annotations

import pytest

from inventory import redis_store


@pytest.fixture
def sku(make_sku):
    return make_sku(stock=5, per_user_limit=2)


@pytest.fixture
def buyer(make_buyers):
    return make_buyers(1)[0]


def post(client, body, key="k-1", raw=None, content_type="application/json"):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key is not None else {}
    if raw is not None:
        return client.generic("POST", "/api/v1/orders", raw, content_type=content_type, **headers)
    return client.post("/api/v1/orders", body, format="json", **headers)


BAD_BODIES = [
    ({"quantity": 1}, "invalid"),
    ({"sku_id": "X"}, "invalid"),
    ({"sku_id": "SKU", "quantity": 0}, "invalid"),
    ({"sku_id": "SKU", "quantity": -3}, "invalid"),
    ({"sku_id": "SKU", "quantity": 10**30}, "invalid"),
    ({"sku_id": "SKU", "quantity": 1.5}, "invalid"),
    ({"sku_id": "SKU", "quantity": "2"}, "invalid"),
    ({"sku_id": "SKU", "quantity": True}, "invalid"),
    ({"sku_id": "SKU", "quantity": None}, "invalid"),
    ({"sku_id": "", "quantity": 1}, "invalid"),
    ({"sku_id": "x" * 65, "quantity": 1}, "invalid"),
    ({"sku_id": ["SKU"], "quantity": 1}, "invalid"),
]


@pytest.mark.parametrize("body,code", BAD_BODIES)
def test_bad_body_is_400_and_takes_nothing(api, sku, buyer, body, code):
    body = {k: (sku.sku_id if v == "SKU" else v) for k, v in body.items()}
    r = post(api(buyer[1]), body)
    assert r.status_code == 400, r.content
    assert r.json()["code"] == code
    assert redis_store.live_stock(sku_id=sku.sku_id).available == 5


@pytest.mark.parametrize("raw", ["{not json", "", "[1, 2]", '"text"', "null"])
def test_malformed_json_is_400(api, sku, buyer, raw):
    r = post(api(buyer[1]), None, raw=raw)
    assert r.status_code == 400 and r.json()["code"] == "invalid"
    assert redis_store.live_stock(sku_id=sku.sku_id).available == 5


@pytest.mark.parametrize("key", [None, "", "k" * 65])
def test_missing_or_bad_idempotency_key(api, sku, buyer, key):
    r = post(api(buyer[1]), {"sku_id": sku.sku_id, "quantity": 1}, key=key)
    assert r.status_code == 400 and r.json()["code"] == "idempotency_key_required"
    assert redis_store.live_stock(sku_id=sku.sku_id).available == 5


def test_unknown_sku_is_404(api, buyer):
    r = post(api(buyer[1]), {"sku_id": "NO-SUCH-SKU-123", "quantity": 1})
    assert r.status_code == 404 and r.json()["code"] == "sku_not_found"


def test_no_token_and_bad_token(api, sku):
    r = post(api(), {"sku_id": sku.sku_id, "quantity": 1})
    assert r.status_code == 401 and r.json()["code"] == "not_authenticated"
    r = post(api("0" * 40), {"sku_id": sku.sku_id, "quantity": 1})
    assert r.status_code == 401 and r.json()["code"] == "authentication_failed"
    assert redis_store.live_stock(sku_id=sku.sku_id).available == 5


def test_refused_request_claims_no_key(api, sku, buyer):
    """A 4xx claims nothing: the client fixes the body and retries with the key."""
    c = api(buyer[1])
    assert post(c, {"sku_id": sku.sku_id, "quantity": 3}, key="fixme").json()["code"] == "limit_reached"
    r = post(c, {"sku_id": sku.sku_id, "quantity": 1}, key="fixme")
    assert r.status_code == 202


def test_key_reused_with_other_body_is_422(api, make_sku, sku, buyer):
    c = api(buyer[1])
    first = post(c, {"sku_id": sku.sku_id, "quantity": 1}, key="reuse")
    assert first.status_code == 202
    assert post(c, {"sku_id": sku.sku_id, "quantity": 2}, key="reuse").status_code == 422
    other = make_sku(stock=5)
    r = post(c, {"sku_id": other.sku_id, "quantity": 1}, key="reuse")
    assert r.status_code == 422 and r.json()["code"] == "idempotency_key_reused"
    assert redis_store.live_stock(sku_id=other.sku_id).available == 5
    assert redis_store.live_stock(sku_id=sku.sku_id).available == 4


def test_sale_not_active(api, make_sku, buyer):
    from datetime import timedelta

    from django.utils import timezone

    later = make_sku(stock=5, starts_at=timezone.now() + timedelta(hours=1))
    r = post(api(buyer[1]), {"sku_id": later.sku_id, "quantity": 1})
    assert r.status_code == 409 and r.json()["code"] == "sale_not_active"


def test_unknown_order_is_json_404(api, buyer):
    for oid in ["0" * 32, "not-an-id", "x" * 200]:
        r = api(buyer[1]).get(f"/api/v1/orders/{oid}")
        assert r.status_code == 404 and r.json()["code"] == "not_found"
