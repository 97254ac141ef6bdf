"""Hostile bodies are 400 `invalid` with a code, never a 500: in the parser
itself, and on every endpoint that reads a body, over real HTTP."""
from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import time
import uuid

import pytest
from rest_framework.exceptions import ParseError

from testsupport.processes import start_web
from core.parsers import MAX_DEPTH, parse_json

DEEP = b"[" * 3000 + b"]" * 3000
HOSTILE = {
    "deep array": DEEP,
    "deep object": b'{"a":' * 2500 + b"1" + b"}" * 2500,  # 15 kB: under the 16 kB limit
    "huge integer": b'{"sku_id": "X", "quantity": ' + b"9" * 5000 + b"}",
    "long integer": b'{"quantity": ' + b"1" * 65 + b"}",
    "infinite float": b'{"quantity": 1e999}',
    "NaN": b'{"quantity": NaN}',
    "Infinity": b'{"quantity": -Infinity}',
    "long string": b'{"sku_id": "' + b"x" * 5000 + b'"}',
    "UTF-8 BOM": b'\xef\xbb\xbf{"sku_id": "X", "quantity": 1}',
    "UTF-16": '{"sku_id": "X", "quantity": 1}'.encode("utf-16"),
    "invalid UTF-8": b'{"sku_id": "\xff\xfe", "quantity": 1}',
    "lone surrogate": b'{"sku_id": "\\udc00", "quantity": 1}',
}


@pytest.mark.parametrize("body", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_body_is_a_parse_error(body):
    with pytest.raises(ParseError):
        parse_json(body)


def test_what_is_allowed_still_parses():
    nested = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    assert parse_json(nested) is not None
    # Brackets inside strings are no nesting; a pair of escapes is one character.
    assert parse_json(b'{"sku_id": "' + b"[" * 100 + b'", "e": "\\ud83d\\ude00"}')["e"] == "\U0001F600"
    assert parse_json(b'{"quantity": ' + b"9" * 64 + b"}")["quantity"] == int("9" * 64)


SECRET = "parsers-test-secret"


@pytest.fixture(scope="module")
def hostile_web(process_env):
    proc = start_web(process_env, name="web-parsers", SECKILL_PAYMENT_WEBHOOK_SECRET=SECRET)
    yield proc
    proc.stop()


def send(port: int, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", path, body, {"Content-Type": "application/json", **headers})
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read())


def signed(body: bytes) -> dict[str, str]:
    stamp = str(int(time.time()))
    digest = hmac.new(SECRET.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return {"Seckill-Signature": f"t={stamp},v1={digest}"}


@pytest.mark.parametrize("name", ["deep array", "deep object", "huge integer", "UTF-16", "lone surrogate"])
def test_every_endpoint_that_reads_a_body_answers_400(hostile_web, make_buyers, name):
    body = HOSTILE[name]
    auth = {"Authorization": f"Token {make_buyers(1)[0][1]}", "Idempotency-Key": uuid.uuid4().hex}
    order_id = uuid.uuid4().hex
    for path, headers in [("/api/v1/orders", auth), ("/api/v1/baseline", auth),
                          (f"/api/v1/orders/{order_id}/pay", auth),
                          ("/api/v1/payments/webhook", signed(body))]:
        status, answer = send(hostile_web.port, path, body, headers)
        assert (status, answer["code"]) == (400, "invalid"), (path, status, answer)
