"""The webhook's signature header compared as text from outside: whatever
characters it holds (non-ASCII, as a client's raw UTF-8 bytes arrive through
WSGI decoded as latin-1), it is 400 bad_signature and pays nothing, never a
500 (orders.services.payments.signature_verify checks the shape before the
constant-time comparison)."""
from __future__ import annotations

import time

import pytest
from django.test import Client

from core.errors import BadSignature
from orders.services import payments

SECRET = "whsec-text-" + "Zq7" * 10


@pytest.mark.parametrize("digest", ["é" * 64, "0" * 63 + "é", "\u4e2d" * 64, "0" * 63 + "\uff10",
                                    "é".encode().decode("latin-1") * 32, "A" * 64])
def test_a_signature_header_with_any_characters_is_bad_signature(digest):
    body = b'{"order_id":"x","payment_id":"p","status":"captured"}'
    with pytest.raises(BadSignature):
        payments.signature_verify(secret=SECRET, header=f"t={int(time.time())},v1={digest}", body=body)


def test_over_http_the_webhook_answers_400_bad_signature(settings, live_db):
    settings.SECKILL_PAYMENT_WEBHOOK_SECRET = SECRET
    r = Client().post("/api/v1/payments/webhook", b'{"order_id":"x","payment_id":"p","status":"captured"}',
                      content_type="application/json",
                      HTTP_SECKILL_SIGNATURE=f"t={int(time.time())},v1={'é' * 64}")
    assert r.status_code == 400 and r.json()["code"] == "bad_signature"
