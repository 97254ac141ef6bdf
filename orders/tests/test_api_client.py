"""A client generated from /api/schema/ by a standard generator
(openapi-python-client) places, reads, pays and cancels orders against the
real stack (gunicorn, worker, MySQL, Redis, RabbitMQ), and reads a 409 as the
typed error body the schema declares."""
from __future__ import annotations

import importlib
import subprocess
import sys
import urllib.request
import uuid

import pytest

from testsupport import VENV_BIN
from testsupport.stores import confirmed


@pytest.fixture(scope="module")
def client_package(web, tmp_path_factory):
    out = tmp_path_factory.mktemp("generated")
    schema = out / "schema.json"
    schema.write_bytes(urllib.request.urlopen(f"http://127.0.0.1:{web.port}/api/schema/", timeout=30).read())
    subprocess.run([str(VENV_BIN / "openapi-python-client"), "generate", "--path", str(schema),
                    "--output-path", str(out / "client"), "--meta", "none"],
                   check=True, capture_output=True, timeout=120, cwd=out)
    sys.path.insert(0, str(out))
    try:
        yield "client"
    finally:
        sys.path.remove(str(out))


def test_generated_client_places_reads_pays_and_cancels(client_package, web, worker, make_sku, make_buyers):
    pkg = importlib.import_module(client_package)
    api = importlib.import_module(f"{client_package}.api.orders")
    models = importlib.import_module(f"{client_package}.models")
    for name in ("place_order", "get_order", "pay_order", "cancel_order"):
        importlib.import_module(f"{client_package}.api.orders.{name}")

    sku = make_sku(stock=5, per_user_limit=2)
    token = make_buyers(1)[0][1]
    client = pkg.AuthenticatedClient(base_url=f"http://127.0.0.1:{web.port}", token=token, prefix="Token")

    def place() -> str:
        accepted = api.place_order.sync(client=client, body=models.PlaceOrderBody(sku_id=sku.sku_id, quantity=1),
                                        idempotency_key=uuid.uuid4().hex)
        assert isinstance(accepted, models.OrderAccepted), accepted
        assert accepted.status == models.OrderAcceptedStatus.PROCESSING and accepted.replayed is False
        confirmed(accepted.order_id)
        return accepted.order_id

    paid_id, cancelled_id = place(), place()
    order = api.get_order.sync(client=client, order_id=paid_id)
    assert isinstance(order, models.Order) and order.status == models.OrderStatus.PENDING_PAYMENT
    paid = api.pay_order.sync(client=client, order_id=paid_id, body=models.PayOrderBody(payment_id="pay-1"))
    assert isinstance(paid, models.Order) and paid.status == models.OrderStatus.PAID, paid
    cancelled = api.cancel_order.sync(client=client, order_id=cancelled_id)
    assert isinstance(cancelled, models.Order) and cancelled.status == models.OrderStatus.CANCELLED

    refused = api.cancel_order.sync_detailed(client=client, order_id=paid_id)
    assert refused.status_code == 409
    assert isinstance(refused.parsed, models.CancelOrderResponse409)
    assert refused.parsed.code == models.CancelOrderResponse409Code.NOT_CANCELLABLE
    refused = api.pay_order.sync_detailed(client=client, order_id=cancelled_id, body=models.PayOrderBody())
    assert isinstance(refused.parsed, models.PayOrderResponse409)
    assert refused.parsed.code == models.PayOrderResponse409Code.NOT_PAYABLE
    missing = api.get_order.sync_detailed(client=client, order_id="0" * 32)
    assert isinstance(missing.parsed, models.GetOrderResponse404) and missing.parsed.code.value == "not_found"
