"""The payment provider played by hand: a capture body, its signature as the
provider computes it (independently of the code under test), the webhook
posted in this process, and orders waiting for payment (`pending`)."""
from __future__ import annotations

import hashlib
import hmac
import json
import time
from decimal import Decimal

import pytest

URL = "/api/v1/payments/webhook"
SECRET = "whsec-" + "Hq4r" * 10
# What the payment tests' orders cost (one unit of a SKU at this price).
PRICE = Decimal("12.50")


def sign(raw: bytes, *, secret: str = SECRET, t: int | None = None) -> str:
    t = int(time.time()) if t is None else t
    digest = hmac.new(secret.encode(), f"{t}.".encode() + raw, hashlib.sha256).hexdigest()
    return f"t={t},v1={digest}"


def capture(order_id: str, payment_id: str, *, status: str = "captured", amount: object = "12.50",
            currency: str = "CNY") -> bytes:
    """A capture body; the amount and currency by default what one unit at PRICE costs."""
    return json.dumps({"order_id": order_id, "payment_id": payment_id, "status": status, "amount": amount,
                       "currency": currency}).encode()


def hook(raw: bytes, signature: str | None = "sign", **extra):
    """POST the webhook in this process (the site's handler, CSRF checks on)."""
    from django.test import Client

    headers = {} if signature is None else {"HTTP_SECKILL_SIGNATURE": sign(raw) if signature == "sign" else signature}
    return Client(enforce_csrf_checks=True).post(URL, data=raw, content_type="application/json",
                                                 **headers, **extra)


@pytest.fixture
def webhook_on(settings):
    settings.SECKILL_PAYMENT_WEBHOOK_SECRET = SECRET


@pytest.fixture
def pending(api, make_sku, make_buyers, worker):
    """Orders confirmed by the worker, PENDING_PAYMENT: (sku, [(order_id, client)])."""
    from testsupport.http import place as buy
    from testsupport.stores import confirmed

    def make(n: int = 1, *, stock: int | None = None):
        sku = make_sku(stock=stock or n + 1, per_user_limit=1, price=PRICE)
        out = []
        for _, token in make_buyers(n):
            client = api(token)
            oid = buy(client, sku.sku_id)
            out.append((oid, client))
        for oid, _ in out:
            confirmed(oid)
        return sku, out

    return make
