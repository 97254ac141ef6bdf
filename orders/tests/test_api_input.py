"""Bad input gets the 4xx and code of the contract (docs/contract.md), and takes nothing."""
from __future__ import annotations

import pytest

from inventory.redis import live as redis_live


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


@pytest.mark.parametrize(("body", "code"), BAD_BODIES)
def test_bad_body_is_400_and_takes_nothing(api, sku, buyer, body, code):
    body = {k: (sku.sku_id if v == "SKU" else v) for k, v in body.items()}
    r = post(api(buyer[1]), body)
    assert r.status_code == 400, r.content
    assert r.json()["code"] == code
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 5


@pytest.mark.parametrize("raw", ["{not json", "", "[1, 2]", '"text"', "null"])
def test_malformed_json_is_400(api, sku, buyer, raw):
    r = post(api(buyer[1]), None, raw=raw)
    assert r.status_code == 400 and r.json()["code"] == "invalid"
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 5


def test_a_missing_idempotency_key_is_required(api, sku, buyer):
    r = post(api(buyer[1]), {"sku_id": sku.sku_id, "quantity": 1}, key=None)
    assert r.status_code == 400 and r.json()["code"] == "idempotency_key_required"
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 5


# A key that is there but cannot be one: the code says so, the detail says why.
INVALID_KEYS = [
    ("", "is empty: a key is 1 to 64 visible ASCII characters"),
    ("k" * 65, "is 65 characters long, over the limit of 64"),
    ("K\u00e9y", "outside visible ASCII (U+0021 to U+007E) at position 2"),
    ("k\tey", "outside visible ASCII (U+0021 to U+007E) at position 2"),
    ("key\u4e2d", "outside visible ASCII (U+0021 to U+007E) at position 4"),
    (" key", "begins or ends with a space"),
    ("key ", "begins or ends with a space"),
    ("\u00e9" * 70, "is 70 characters long"),
]


@pytest.mark.parametrize(("key", "why"), INVALID_KEYS, ids=["empty", "long", "latin", "tab", "cjk", "lead-space",
                                                            "trail-space", "long-and-latin"])
def test_a_present_but_invalid_idempotency_key_says_what_is_wrong(api, sku, buyer, key, why):
    from accounts import token_cache

    r = post(api(buyer[1]), {"sku_id": sku.sku_id, "quantity": 1}, key=key)
    assert r.status_code == 400, r.content
    body = r.json()
    assert body["code"] == "idempotency_key_invalid", body
    assert body["detail"].startswith("Header Idempotency-Key ") and why in body["detail"], body["detail"]
    assert "(1..64 chars) is required" not in body["detail"]
    # refused with a 4xx: nothing taken, nothing claimed
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 5
    assert token_cache.user_claims(token=buyer[1]) == []
    assert post(api(buyer[1]), {"sku_id": sku.sku_id, "quantity": 1}, key="after-the-bad-one").status_code == 202


def test_unknown_sku_is_404(api, buyer):
    r = post(api(buyer[1]), {"sku_id": "NO-SUCH-SKU-123", "quantity": 1})
    assert r.status_code == 404 and r.json()["code"] == "sku_not_found"


def test_no_token_and_bad_token(api, sku):
    r = post(api(), {"sku_id": sku.sku_id, "quantity": 1})
    assert r.status_code == 401 and r.json()["code"] == "not_authenticated"
    r = post(api("0" * 40), {"sku_id": sku.sku_id, "quantity": 1})
    assert r.status_code == 401 and r.json()["code"] == "authentication_failed"
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 5


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
    assert redis_live.live_stock(sku_id=other.sku_id).available == 5
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 4


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


# --- the declarations and the handlers agree (orders.api.declarations) ---------------

def schema() -> dict:
    from django.test import Client

    return Client().get("/api/schema/").json()


def operation(doc: dict, path: str, method: str) -> dict:
    return doc["paths"]["/api/v1/" + path][method]


def test_key_limits_are_the_schemas(api, make_sku, buyer):
    import re

    sku = make_sku(stock=10, per_user_limit=5)
    declared = {p["name"]: p["schema"] for p in operation(schema(), "orders", "post")["parameters"]}
    key = declared["Idempotency-Key"]
    assert (key["minLength"], key["maxLength"]) == (1, 64)
    for value, ok in [("k" * 64, True), ("k" * 65, False), ("a b", True), (" ab", False), ("é", False),
                      ("=HYPERLINK(1)", True)]:
        assert (re.match(key["pattern"], value) is not None and len(value) <= key["maxLength"]) == ok, value
        r = post(api(buyer[1]), {"sku_id": sku.sku_id, "quantity": 1}, key=value)
        assert (r.status_code == 202) == ok, (value, r.content)


def test_both_key_codes_are_declared_where_a_key_is_read():
    doc = schema()
    for path in ("orders", "baseline"):
        r400 = operation(doc, path, "post")["responses"]["400"]
        codes = set(r400["content"]["application/json"]["schema"]["properties"]["code"]["enum"])
        assert {"invalid", "idempotency_key_required", "idempotency_key_invalid"} <= codes, (path, codes)


def test_body_limits_are_the_schemas(api, sku, buyer):
    body = operation(schema(), "orders", "post")["requestBody"]["content"]["application/json"]["schema"]
    assert body["additionalProperties"] is True and "ignored" in body["description"]
    assert body["properties"]["sku_id"]["minLength"] == 1 and body["properties"]["sku_id"]["maxLength"] == 64
    assert body["properties"]["quantity"] == {"type": "integer", "minimum": 1, "maximum": 1000, "example": 1}
    assert post(api(buyer[1]), {"sku_id": sku.sku_id, "quantity": 1000}).status_code == 409  # valid: refused by stock
    assert post(api(buyer[1]), {"sku_id": sku.sku_id, "quantity": 1001}).json()["code"] == "invalid"
    r = post(api(buyer[1]), {"sku_id": sku.sku_id, "quantity": 1, "unknown": [1]})
    assert r.status_code == 202


def test_payment_id_limit_is_the_schemas(api, buyer):
    pay = operation(schema(), "orders/{order_id}/pay", "post")
    spec = pay["requestBody"]["content"]["application/json"]["schema"]["properties"]["payment_id"]
    assert spec["maxLength"] == 128 and pay["requestBody"]["required"] is False
    r = api(buyer[1]).post(f"/api/v1/orders/{'0' * 32}/pay", {"payment_id": "p" * 129}, format="json")
    assert r.status_code == 400 and r.json()["errors"]["payment_id"]
    r = api(buyer[1]).post(f"/api/v1/orders/{'0' * 32}/pay", {"payment_id": "p" * 128}, format="json")
    assert r.status_code == 404


@pytest.mark.parametrize("page", ["abc", "", "last", "0", "-1", "+1", " 1", "1.0"])
def test_a_page_that_is_not_a_whole_number_is_404_as_declared(api, buyer, page):
    declared = {p["name"]: p for p in operation(schema(), "orders", "get")["parameters"]}["page"]
    assert declared["schema"] == {"type": "integer", "minimum": 1} and not declared["required"]
    for path in ("/api/v1/orders", "/api/v1/skus"):
        r = api(buyer[1]).get(path, {"page": page})
        assert r.status_code == 404 and r.json()["code"] == "not_found", (path, page, r.content)
    assert api(buyer[1]).get("/api/v1/orders", {"page": "1"}).status_code == 200


def test_every_status_is_declared_with_its_codes():
    doc = schema()
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            if op["security"]:
                codes = op["responses"]["401"]["content"]["application/json"]["schema"]["properties"]["code"]
                assert codes["enum"] == ["not_authenticated", "authentication_failed"], path
                assert op["responses"]["429"]["headers"]["Retry-After"]["required"] is True
            assert "500" not in op["responses"] and "503" in op["responses"], (path, method)
    pay = operation(doc, "orders/{order_id}/pay", "post")["responses"]["409"]
    assert set(pay["content"]["application/json"]["schema"]["properties"]["code"]["enum"]) == {
        "not_payable", "payment_id_reused", "already_paid", "payment_by_provider"}
    assert set(operation(doc, "baseline", "post")["responses"]) == {"202", "400", "401", "413", "415", "429", "503"}


def test_an_undeclared_method_is_405_with_allow(api, buyer):
    r = api(buyer[1]).delete("/api/v1/orders")
    assert r.status_code == 405 and r.json()["code"] == "method_not_allowed"
    assert r["Allow"] == "GET, HEAD, OPTIONS, POST"
    assert api(buyer[1]).get(f"/api/v1/orders/{'0' * 32}/pay").status_code == 405
