"""pay, cancel, list and detail spend from a per-user budget of their own
(SECKILL_ORDER_CALLS_RATE), in the round trip that authenticates the token:
over it they answer 429 `throttled` with Retry-After, change nothing, ask
MySQL nothing and cost no Redis round trip beyond that one. On the single
Redis and on a Redis Cluster (every key of the token shares its slot)."""
from __future__ import annotations

import http.client
import json
import uuid
from contextlib import contextmanager
from unittest import mock

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from inventory.redis import live as redis_live
from orders.models import Order
from testsupport.http import place
from testsupport.processes import start_web
from testsupport.stores import confirmed

pytestmark = pytest.mark.redis_both


@contextmanager
def redis_round_trips():
    """How many times this process wrote a command (or a pipeline) to a Redis
    connection: one per round trip, on one Redis or a cluster alike."""
    from redis.connection import AbstractConnection

    sent: list[int] = []
    real = AbstractConnection.send_packed_command

    def counting(self, command, check_health=True):
        sent.append(1)
        return real(self, command, check_health)

    with mock.patch.object(AbstractConnection, "send_packed_command", counting):
        yield sent


def throttled(response, *, longest_s: int) -> bool:
    return response.status_code == 429 and response.json()["code"] == "throttled" \
        and 1 <= int(response["Retry-After"]) <= longest_s


@pytest.mark.worker
@override_settings(SECKILL_ORDER_CALLS=(4, 15_000))  # 4 a minute
def test_over_the_rate_order_calls_are_429_and_a_throttled_pay_or_cancel_changes_nothing(
        api, make_sku, make_buyers, worker):
    sku = make_sku(stock=5, per_user_limit=5)
    (_, token), (_, other) = make_buyers(2)
    client = api(token)
    order_id = place(client, sku.sku_id)
    confirmed(order_id)
    detail = f"/api/v1/orders/{order_id}"
    for path in (detail, "/api/v1/orders", detail, detail):  # the budget: four calls
        assert client.get(path).status_code == 200
    with CaptureQueriesContext(connection) as queries, redis_round_trips() as trips:
        pay = client.post(f"{detail}/pay", {"payment_id": "pay-1"}, format="json")
    assert throttled(pay, longest_s=15), (pay.status_code, pay.content)
    assert queries.captured_queries == [] and len(trips) == 1  # the token's round trip, nothing else
    cancel = client.post(f"{detail}/cancel")
    assert throttled(cancel, longest_s=15), cancel.content
    assert throttled(client.get(detail), longest_s=15) and throttled(client.get("/api/v1/orders"), longest_s=15)
    row = Order.objects.get(pk=order_id)
    assert row.status == Order.Status.PENDING_PAYMENT and row.paid_at is None
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 4  # the cancel gave nothing back
    # the budget is this user's: another buyer is served, and this one's purchases are a budget apart
    assert api(other).get("/api/v1/orders").status_code == 200
    assert client.post("/api/v1/orders", {"sku_id": sku.sku_id, "quantity": 1}, format="json",
                       HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex).status_code == 202


@override_settings(SECKILL_ORDER_CALLS=(3, 60_000), SECKILL_THROTTLE=(0, 0))
def test_the_order_calls_budget_is_spent_by_each_of_the_four_calls(api, make_buyers):
    (_, token), = make_buyers(1)
    client = api(token)
    missing = f"/api/v1/orders/{uuid.uuid4().hex}"
    answers = [client.post(f"{missing}/pay", {}, format="json").status_code,
               client.post(f"{missing}/cancel").status_code, client.get(missing).status_code]
    assert 429 not in answers, answers  # three calls of three kinds spent it (404, or 409 where buyers may not pay)
    assert throttled(client.get("/api/v1/orders"), longest_s=60)


def test_the_budget_costs_no_redis_round_trip_of_its_own(api, make_buyers):
    (_, token), = make_buyers(1)
    client = api(token)
    path = f"/api/v1/orders/{uuid.uuid4().hex}"
    client.get(path)  # the token's record cached
    counts = {}
    for rate in ((0, 0), (1000, 1)):
        with override_settings(SECKILL_ORDER_CALLS=rate), redis_round_trips() as trips:
            assert client.get(path).status_code == 404
            assert client.get("/api/v1/orders").status_code == 200
        counts[rate] = len(trips)
    assert counts[(0, 0)] == counts[(1000, 1)], counts


def test_a_forgotten_token_takes_its_order_calls_budget_with_it(api, make_buyers):
    from rest_framework.authtoken.models import Token

    from accounts import token_cache
    from core.redis.connection import redis

    (_, token), = make_buyers(1)
    with override_settings(SECKILL_ORDER_CALLS=(5, 1000)):
        assert api(token).get("/api/v1/orders").status_code == 200
    keys = token_cache.token_keys(token)
    assert redis().exists(keys.calls)
    Token.objects.filter(key=token).delete()
    assert not redis().exists(keys.calls, keys.rate, keys.claims)


def test_the_rate_is_read_like_the_purchase_rate_and_named_when_wrong():
    from django.core.exceptions import ImproperlyConfigured

    from seckill_site.settings.env import parse_rate

    assert parse_rate("20/s", "SECKILL_ORDER_CALLS_RATE") == (20, 50) and parse_rate("0") == (0, 0)
    with pytest.raises(ImproperlyConfigured, match="SECKILL_ORDER_CALLS_RATE"):
        parse_rate("twenty", "SECKILL_ORDER_CALLS_RATE")


@pytest.mark.web
def test_a_real_server_throttles_a_burst_at_the_default_rate(process_env, make_buyers):
    """The default (20/s) read by a real web process: a burst of reads from one
    user meets 429 with Retry-After, while another user's reads go through."""
    from django.conf import settings

    assert settings.SECKILL_ORDER_CALLS_RATE == "20/s"
    web = start_web(process_env, name="web-order-calls", workers=1, SECKILL_ORDER_CALLS_RATE="20/s")
    (_, hammer), (_, calm) = make_buyers(2)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
        answers = []
        for _ in range(60):
            conn.request("GET", "/api/v1/orders", headers={"Authorization": f"Token {hammer}"})
            resp = conn.getresponse()
            answers.append((resp.status, resp.getheader("Retry-After"), json.loads(resp.read())))
        calm_conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
        calm_conn.request("GET", "/api/v1/orders", headers={"Authorization": f"Token {calm}"})
        calm_status = calm_conn.getresponse().status
    finally:
        web.stop()
    statuses = [s for s, _, _ in answers]
    assert statuses.count(200) >= 20 and statuses.count(429) >= 10, statuses
    refused = [(ra, body) for s, ra, body in answers if s == 429]
    assert all(body["code"] == "throttled" and ra is not None and int(ra) >= 1 for ra, body in refused)
    assert calm_status == 200


def test_the_schema_declares_each_429_with_the_rate_it_comes_from(live_db):
    from django.test import Client

    paths = Client().get("/api/schema/").json()["paths"]
    calls = [("/api/v1/orders", "get"), ("/api/v1/orders/{order_id}", "get"),
             ("/api/v1/orders/{order_id}/pay", "post"), ("/api/v1/orders/{order_id}/cancel", "post")]
    for path, method in calls + [("/api/v1/orders", "post")]:
        answer = paths[path][method]["responses"]["429"]
        assert answer["headers"]["Retry-After"]["required"] is True
        assert answer["content"]["application/json"]["schema"]["properties"]["code"]["enum"] == ["throttled"]
        rate = "SECKILL_THROTTLE_RATE" if (path, method) == ("/api/v1/orders", "post") else "SECKILL_ORDER_CALLS_RATE"
        assert rate in answer["description"], (path, method, answer["description"])
