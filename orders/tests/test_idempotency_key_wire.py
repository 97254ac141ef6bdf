"""An Idempotency-Key as it arrives over real HTTP, under both servers: the
raw bytes of a header (a client sending UTF-8, which WSGI hands over read as
latin-1) are refused 400 `idempotency_key_invalid` with a detail that names
what is wrong, take nothing and claim nothing; a missing key stays
`idempotency_key_required`."""
from __future__ import annotations

import http.client
import json

import pytest

from testsupport.processes import start_web

pytestmark = pytest.mark.web


@pytest.fixture(scope="module", params=["granian", "gunicorn"])
def key_web(request, process_env):
    proc = start_web(process_env, name=f"web-key-{request.param}", server=request.param, workers=1)
    yield proc
    proc.stop()


def buy_raw(port: int, token: str, sku_id: str, key: bytes | None) -> tuple[int, dict]:
    """POST orders with the key's bytes exactly as given (http.client sends bytes unencoded)."""
    body = json.dumps({"sku_id": sku_id, "quantity": 1}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest("POST", "/api/v1/orders")
        conn.putheader("Authorization", f"Token {token}")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(len(body)))
        if key is not None:
            conn.putheader("Idempotency-Key", key)
        conn.endheaders(body)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


# What the detail says under each server: gunicorn passes the bytes on (read
# as latin-1), granian passes a value holding any byte outside visible ASCII
# as an empty string, so its detail can only say that such a value arrives empty.
GRANIAN_NON_ASCII = "outside visible ASCII, U+0021 to U+007E, may reach the server as empty"


@pytest.mark.parametrize(("key", "why", "under_granian"), [
    ("Kéy".encode(), "outside visible ASCII (U+0021 to U+007E) at position 2", GRANIAN_NON_ASCII),
    ("订单-1".encode(), "outside visible ASCII (U+0021 to U+007E) at position 1", GRANIAN_NON_ASCII),
    (b"k" * 65, "is 65 characters long, over the limit of 64", "is 65 characters long, over the limit of 64"),
    (b"k" * 60 + "é".encode() * 3, "is 66 characters long", GRANIAN_NON_ASCII),
], ids=["utf8-latin", "utf8-cjk", "long", "long-utf8"])
def test_a_raw_utf8_or_long_key_is_invalid_and_says_why(key_web, make_sku, make_buyers, key, why, under_granian):
    from accounts import token_cache
    from inventory.redis import live as redis_live

    sku = make_sku(stock=3)
    (_, token), = make_buyers(1)
    status, body = buy_raw(key_web.port, token, sku.sku_id, key)
    assert status == 400 and body["code"] == "idempotency_key_invalid", (status, body)
    expected = under_granian if key_web.server == "granian" else why
    assert expected in body["detail"], body["detail"]
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 3
    assert token_cache.user_claims(token=token) == []


def test_a_missing_key_is_still_required_and_a_good_one_buys(key_web, make_sku, make_buyers):
    sku = make_sku(stock=3)
    (_, token), = make_buyers(1)
    status, body = buy_raw(key_web.port, token, sku.sku_id, None)
    assert status == 400 and body["code"] == "idempotency_key_required", body
    status, body = buy_raw(key_web.port, token, sku.sku_id, b"a key with spaces inside")
    assert status == 202, body
