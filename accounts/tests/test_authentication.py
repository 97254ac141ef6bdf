"""Token authentication from Redis: throttling in the same round trip, failed
authentications limited per client address (behind trusted proxies too), a
bounded cache that keeps busy tokens, revocations that roll back, fills that
cannot resurrect a deleted token, tokens as exact strings."""
from __future__ import annotations

import time
import uuid

import pytest
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token

from accounts import authentication, token_cache
from core.client import parse_trusted_proxies
from core.redis.connection import redis
from inventory.redis import live as redis_live
from orders.models import Order
from testsupport import wait_until
from testsupport.http import post_order as buy

pytestmark = pytest.mark.redis_both


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
    live = redis_live.live_stock(sku_id=sku.sku_id)
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
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 4
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
    r = redis()
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
    # the deletion, the refusal while it is pending and the rollback: one transaction
    with pytest.raises(RuntimeError, match="rolled back"), transaction.atomic():  # noqa: PT012
        Token.objects.filter(key=token).delete()
        assert buy(client, sku.sku_id).status_code == 401  # refused while the deletion is pending
        raise RuntimeError("rolled back")
    assert Token.objects.filter(key=token).exists()
    wait_until(lambda: buy(client, sku.sku_id).status_code == 202, timeout=5, what="the token works again")


def test_a_committed_revocation_leaves_only_a_short_tombstone(api, make_sku, make_buyers, live_db):
    sku = make_sku(stock=5, per_user_limit=5)
    (_, token), = make_buyers(1)
    assert buy(api(token), sku.sku_id).status_code == 202
    Token.objects.filter(key=token).delete()
    assert buy(api(token), sku.sku_id).status_code == 401
    keys = token_cache.token_keys(token)
    r = redis()
    assert not r.exists(keys.claims, keys.rate)
    assert r.hget(keys.record, "u") == b"-" and 0 < r.pttl(keys.record) <= token_cache.TOMBSTONE_MS


PROXY = "10.0.0.2"
BEHIND_PROXY = override_settings(SECKILL_TRUSTED_PROXIES=parse_trusted_proxies("10.0.0.0/8"),
                                 SECKILL_AUTH_FAILURES_PER_MINUTE=5)


def some_address() -> str:
    return f"198.51.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250 + 1}"


def uncached(token: str) -> str:
    """Drop the token's record, as its lifetime or a Redis loss would."""
    redis().delete(token_cache.token_keys(token).record)
    return token


@BEHIND_PROXY
def test_bogus_tokens_from_one_client_behind_the_proxy_refuse_no_other_clients_token(
        api, make_sku, make_buyers, live_db):
    sku = make_sku(stock=10, per_user_limit=10)
    attacker, buyer = some_address(), some_address()
    via_proxy = {"REMOTE_ADDR": PROXY}
    (_, cached), (_, cold), (_, own) = make_buyers(3)
    assert buy(api(cached), sku.sku_id, **via_proxy, HTTP_X_FORWARDED_FOR=buyer).status_code == 202
    # The attacker makes up tokens, and names other addresses on the left: never read.
    codes = [buy(api(uuid.uuid4().hex), sku.sku_id, **via_proxy,
                 HTTP_X_FORWARDED_FOR=f"{some_address()}, {attacker}").status_code for _ in range(7)]
    assert codes == [401] * 5 + [429] * 2
    assert buy(api(cached), sku.sku_id, **via_proxy, HTTP_X_FORWARDED_FOR=buyer).status_code == 202
    assert buy(api(uncached(cold)), sku.sku_id, **via_proxy, HTTP_X_FORWARDED_FOR=buyer).status_code == 202
    assert api(uncached(cold)).get("/api/v1/orders", **via_proxy, HTTP_X_FORWARDED_FOR=buyer).status_code == 200
    # The attacker's own address: a cached token is served; an uncached one cannot
    # be told from the flood without asking MySQL, and waits out the minute.
    assert buy(api(own), sku.sku_id, **via_proxy, HTTP_X_FORWARDED_FOR=attacker).status_code == 202
    late = buy(api(uncached(own)), sku.sku_id, **via_proxy, HTTP_X_FORWARDED_FOR=attacker)
    assert late.status_code == 429 and 1 <= int(late["Retry-After"]) <= 60


@BEHIND_PROXY
def test_an_untrusted_peer_cannot_escape_the_limit_by_naming_other_addresses(api, make_sku, live_db):
    sku = make_sku(stock=5)
    peer = f"203.0.113.{uuid.uuid4().int % 250 + 1}"  # not a trusted proxy: its header is its own text
    codes = [buy(api(uuid.uuid4().hex), sku.sku_id, REMOTE_ADDR=peer,
                 HTTP_X_FORWARDED_FOR=some_address()).status_code for _ in range(6)]
    assert codes == [401] * 5 + [429]


def test_a_busy_token_stays_cached_past_its_lifetime_and_sql_changes_still_show_within_it(
        api, make_buyers, live_db, settings):
    from django.contrib.auth import get_user_model

    settings.SECKILL_AUTH_FAILURES_PER_MINUTE = 1
    settings.SECKILL_TOKEN_CACHE_SECONDS = 2
    (user, token), = make_buyers(1)
    address = some_address()
    # The address is over the unknown-token limit: a token that fell out of the
    # cache would be refused (429) from here.
    assert api(uuid.uuid4().hex).get("/api/v1/orders", REMOTE_ADDR=address).status_code == 401
    client = api(token)
    started = time.monotonic()
    with CaptureQueriesContext(connection) as queries:
        while time.monotonic() - started < 2 * settings.SECKILL_TOKEN_CACHE_SECONDS + 0.5:
            assert client.get("/api/v1/orders", REMOTE_ADDR=address).status_code == 200
            time.sleep(0.05)
    token_reads = [q for q in queries.captured_queries if "authtoken_token" in q["sql"]]
    assert 2 <= len(token_reads) <= 6  # refreshed a few times, not on every request
    # A deactivation that bypasses the signals shows within the lifetime.
    get_user_model().objects.filter(pk=user.pk).update(is_active=False)
    changed = time.monotonic()
    refused = wait_until(lambda: client.get("/api/v1/orders", REMOTE_ADDR=address).status_code == 401,
                         timeout=settings.SECKILL_TOKEN_CACHE_SECONDS + 1, interval=0.05, what="refused")
    assert refused and time.monotonic() - changed <= settings.SECKILL_TOKEN_CACHE_SECONDS + 0.2
    assert client.get("/api/v1/orders", REMOTE_ADDR=address).json()["detail"] == "User inactive or deleted."


def test_a_token_deleted_by_sql_is_refused_by_the_refresh(api, make_buyers, live_db, settings):
    settings.SECKILL_TOKEN_CACHE_SECONDS = 300
    (_, token), = make_buyers(1)
    client = api(token)
    assert client.get("/api/v1/orders").status_code == 200
    with connection.cursor() as cursor:  # no signal
        cursor.execute("DELETE FROM authtoken_token WHERE `key` = %s", [token])
    redis().pexpire(token_cache.token_keys(token).record, 1000)  # close to its expiry
    assert client.get("/api/v1/orders").status_code == 401
    assert redis().hget(token_cache.token_keys(token).record, "u") == b"-"


def test_a_fill_racing_a_deletion_does_not_bring_the_token_back(api, make_sku, make_buyers, live_db, monkeypatch):
    sku = make_sku(stock=5, per_user_limit=5)
    (_, token), = make_buyers(1)
    uncached(token)
    read = authentication._token_row

    def read_then_deleted(key):
        row = read(key)  # the fill has read the token...
        Token.objects.filter(key=key).delete()  # ...when its deletion commits (signals run)
        return row

    monkeypatch.setattr(authentication, "_token_row", read_then_deleted)
    assert buy(api(token), sku.sku_id).status_code == 401
    monkeypatch.undo()
    assert buy(api(token), sku.sku_id).status_code == 401
    assert redis().hget(token_cache.token_keys(token).record, "u") == b"-"
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 5


def test_a_fill_slower_than_its_budget_is_not_cached_and_answers_503(api, make_buyers, live_db, monkeypatch):
    (_, token), = make_buyers(1)
    uncached(token)
    read = authentication._token_row
    monkeypatch.setattr(token_cache, "FILL_BUDGET_MS", 50)
    monkeypatch.setattr(authentication, "_token_row", lambda key: (time.sleep(0.2), read(key))[1])
    r = api(token).get("/api/v1/orders")
    assert r.status_code == 503 and r.json()["code"] == "unavailable"
    assert not redis().exists(token_cache.token_keys(token).record)
    monkeypatch.undo()
    assert api(token).get("/api/v1/orders").status_code == 200


def test_a_case_variant_of_a_token_is_refused_and_leaves_nothing(api, make_sku, make_buyers, live_db):
    sku = make_sku(stock=5, per_user_limit=5)
    (_, token), = make_buyers(1)
    first_letter = next(i for i, ch in enumerate(token) if ch.isalpha())
    variants = {token.upper(), token[:first_letter] + token[first_letter].upper() + token[first_letter + 1:]}
    assert buy(api(token), sku.sku_id).status_code == 202
    address = some_address()
    for t in variants:
        c = api(t)
        assert buy(c, sku.sku_id, REMOTE_ADDR=address).status_code == 401
        assert c.get("/api/v1/orders", REMOTE_ADDR=address).status_code == 401
        assert c.get(f"/api/v1/skus/{sku.sku_id}", REMOTE_ADDR=address).status_code == 401
        assert not redis().exists(*token_cache.token_keys(t).__dict__.values())
    assert buy(api(token), sku.sku_id).status_code == 202
    assert api(uncached(token)).get("/api/v1/orders").status_code == 200


@override_settings(SECKILL_AUTH_FAILURES_PER_MINUTE=3)
def test_an_ipv6_client_is_limited_by_its_64_whatever_address_it_takes(api, live_db):
    net = f"2001:db8:{uuid.uuid4().int % 65535:x}:1"
    codes = [api(uuid.uuid4().hex).get("/api/v1/orders", REMOTE_ADDR=f"{net}::{i + 1:x}").status_code
             for i in range(4)]
    assert codes == [401, 401, 401, 429]
    assert api(uuid.uuid4().hex).get("/api/v1/orders", REMOTE_ADDR="2001:db8:ffff:2::1").status_code == 401
