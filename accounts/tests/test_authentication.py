"""Token authentication from Redis: throttling in the same round trip, failed
authentications limited per address, a bounded cache, revocations that roll back."""
from __future__ import annotations

import time
import uuid

import pytest
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token

from conftest import post_order as buy, wait_until
from accounts import token_cache
from inventory import redis_store
from orders.models import Order


@pytest.mark.worker
@override_settings(SECKILL_THROTTLE=(10, 100))  # 10/s
def test_a_hammering_client_gets_429_while_another_buyer_is_served(api, make_sku, make_buyers, worker):
    sku = make_sku(stock=200, per_user_limit=200)
    (_, hammer), (_, calm) = make_buyers(2)
    h, c = api(hammer), api(calm)
    answers, served = [], []
    for i in range(60):
        answers.append(buy(h, sku.sku_id))
        if i % 20 == 0:
            served.append(buy(c, sku.sku_id))
    codes = [r.status_code for r in answers]
    assert 10 <= codes.count(202) < 30 and codes.count(429) >= 30, codes
    throttled = next(r for r in answers if r.status_code == 429)
    assert throttled.json()["code"] == "throttled" and int(throttled["Retry-After"]) >= 1
    assert [r.status_code for r in served] == [202, 202, 202]
    accepted = {r.json()["order_id"] for r in answers + served if r.status_code == 202}
    wait_until(lambda: Order.objects.filter(sku_id=sku.sku_id).count() == len(accepted), what="all confirmed")
    assert set(Order.objects.filter(sku_id=sku.sku_id).values_list("order_id", flat=True)) == accepted
    live = redis_store.live_stock(sku_id=sku.sku_id)
    assert live.available == 200 - len(accepted)  # throttled clicks took nothing


@override_settings(SECKILL_THROTTLE=(1, 60_000))  # 1/m
def test_a_throttled_click_takes_nothing_and_asks_mysql_nothing(api, make_sku, make_buyers):
    sku = make_sku(stock=5, per_user_limit=5)
    (_, token), = make_buyers(1)
    client = api(token)
    assert buy(client, sku.sku_id).status_code == 202
    with CaptureQueriesContext(connection) as queries:
        again = buy(client, sku.sku_id)
    assert again.status_code == 429 and 50 <= int(again["Retry-After"]) <= 60
    assert queries.captured_queries == []
    assert redis_store.live_stock(sku_id=sku.sku_id).available == 4
    # reads are not purchases: not throttled
    assert client.get("/api/v1/orders").status_code == 200


@override_settings(SECKILL_THROTTLE=(0, 0))
def test_throttling_off(api, make_sku, make_buyers):
    sku = make_sku(stock=50, per_user_limit=50)
    (_, token), = make_buyers(1)
    client = api(token)
    assert {buy(client, sku.sku_id).status_code for _ in range(30)} == {202}


@override_settings(SECKILL_AUTH_FAILURES_PER_MINUTE=5)
def test_unknown_tokens_leave_no_state_and_are_limited_per_address(api, make_sku, make_buyers, live_db):
    sku = make_sku(stock=5)
    address = f"10.9.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}"
    made_up = [uuid.uuid4().hex for _ in range(8)]
    codes = [buy(api(t), sku.sku_id, REMOTE_ADDR=address).status_code for t in made_up[:5]]
    assert codes == [401] * 5
    with CaptureQueriesContext(connection) as queries:
        late = buy(api(made_up[5]), sku.sku_id, REMOTE_ADDR=address)
    assert late.status_code == 429 and late.json()["code"] == "throttled" and late["Retry-After"]
    assert queries.captured_queries == []  # refused before MySQL is asked
    r = redis_store.redis()
    assert not any(r.exists(*token_cache.token_keys(t).__dict__.values()) for t in made_up)
    # another address, and a real buyer from the same one, are unaffected
    assert buy(api(made_up[6]), sku.sku_id, REMOTE_ADDR="10.1.1.1").status_code == 401
    (_, token), = make_buyers(1)
    assert buy(api(token), sku.sku_id, REMOTE_ADDR=address).status_code == 202


@override_settings(SECKILL_TOKEN_CACHE_SECONDS=1)
def test_a_deactivation_made_outside_the_signals_takes_effect_when_the_record_expires(
        api, make_sku, make_buyers, live_db):
    from django.contrib.auth import get_user_model

    sku = make_sku(stock=5, per_user_limit=5)
    (user, token), = make_buyers(1)
    client = api(token)
    assert buy(client, sku.sku_id).status_code == 202  # the record is cached now
    get_user_model().objects.filter(pk=user.pk).update(is_active=False)  # no signal
    time.sleep(1.2)
    assert buy(client, sku.sku_id).status_code == 401


@override_settings(SECKILL_TOKEN_REVOKING_SECONDS=1)
def test_a_revocation_that_rolls_back_does_not_lock_the_user_out(api, make_sku, make_buyers, live_db):
    sku = make_sku(stock=5, per_user_limit=5)
    (_, token), = make_buyers(1)
    client = api(token)
    assert buy(client, sku.sku_id).status_code == 202
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            Token.objects.filter(key=token).delete()
            assert buy(client, sku.sku_id).status_code == 401  # refused while the deletion is pending
            raise RuntimeError("rolled back")
    assert Token.objects.filter(key=token).exists()
    wait_until(lambda: buy(client, sku.sku_id).status_code == 202, timeout=5, what="the token works again")


def test_a_committed_revocation_leaves_nothing_behind(api, make_sku, make_buyers, live_db):
    sku = make_sku(stock=5, per_user_limit=5)
    (_, token), = make_buyers(1)
    assert buy(api(token), sku.sku_id).status_code == 202
    Token.objects.filter(key=token).delete()
    assert buy(api(token), sku.sku_id).status_code == 401
    keys = token_cache.token_keys(token)
    assert not redis_store.redis().exists(keys.record, keys.claims, keys.rate)
