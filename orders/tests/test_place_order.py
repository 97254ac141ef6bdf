"""The purchase path: no MySQL, idempotent, and a failed publish takes nothing."""
from __future__ import annotations

import time
from unittest import mock

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.redis.connection import redis
from core.redis.errors import RedisError
from inventory.redis import gate, keys as redis_keys, live as redis_live
from orders.models import Order
from testsupport import wait_until
from testsupport.http import post_order as buy
from testsupport.stores import assert_balanced, settled

pytestmark = pytest.mark.redis_both


def test_purchase_makes_no_mysql_query(api, make_sku, make_buyers):
    sku = make_sku(stock=5)
    (_, token), = make_buyers(1)
    client = api(token)
    buy(client, sku.sku_id, "warm-up-other-key")  # first call may load the token record
    (_, token2), = make_buyers(1)
    client2 = api(token2)
    with CaptureQueriesContext(connection) as on_accept:
        accepted = buy(client2, sku.sku_id, "k1")
    with CaptureQueriesContext(connection) as on_refusal:
        refused = buy(client2, sku.sku_id, "k2")
    assert accepted.status_code == 202 and accepted.json()["status"] == "PROCESSING"
    assert refused.status_code == 409 and refused.json()["code"] == "limit_reached"
    assert on_accept.captured_queries == []
    assert on_refusal.captured_queries == []
    replay = buy(client2, sku.sku_id, "k1")
    assert replay.status_code == 202 and replay.json()["order_id"] == accepted.json()["order_id"]
    assert replay.json()["replayed"] is True
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 3


@pytest.mark.worker
def test_order_is_processing_then_pending_payment(api, make_sku, make_buyers, worker):
    sku = make_sku(stock=3)
    (user, token), = make_buyers(1)
    client = api(token)
    r = buy(client, sku.sku_id, "only")
    assert r.status_code == 202
    order_id = r.json()["order_id"]
    first = client.get(f"/api/v1/orders/{order_id}").json()
    assert first["status"] in ("PROCESSING", "PENDING_PAYMENT")
    wait_until(lambda: client.get(f"/api/v1/orders/{order_id}").json()["status"] == "PENDING_PAYMENT",
               what="order confirmed")
    settled(sku.sku_id)
    sku = assert_balanced(sku.sku_id)
    assert (sku.available_stock, sku.locked_stock) == (2, 1)
    order = Order.objects.get(pk=order_id)
    assert order.user_id == user.pk and order.expires_at is not None
    # another user cannot see it
    (_, other), = make_buyers(1)
    assert api(other).get(f"/api/v1/orders/{order_id}").status_code == 404
    listed = client.get("/api/v1/orders").json()
    assert [o["order_id"] for o in listed["results"]] == [order_id]


def test_failed_publish_undoes_the_take_and_answers_503(api, make_sku, make_buyers):
    sku = make_sku(stock=2)
    (_, token), = make_buyers(1)
    client = api(token)
    with mock.patch("amqp.channel.Channel._basic_publish", side_effect=ConnectionResetError("broker gone")):
        r = buy(client, sku.sku_id, "k")
    assert r.status_code == 503 and r.json()["code"] == "unavailable"
    live = redis_live.live_stock(sku_id=sku.sku_id)
    assert (live.available, live.inflight) == (2, 0)
    assert gate.inflight_entries(sku_id=sku.sku_id) == []
    # nothing was claimed: the same key works once the broker is back
    again = buy(client, sku.sku_id, "k")
    assert again.status_code == 202
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 1


def test_redis_down_answers_503(api, make_sku, make_buyers):
    sku = make_sku(stock=2)
    (_, token), = make_buyers(1)
    client = api(token)
    buy(client, sku.sku_id, "prime")  # token record cached
    with mock.patch("orders.services.place.run_together", side_effect=RedisError("down")):
        r = buy(client, sku.sku_id, "k2")
    assert r.status_code == 503 and r.json()["code"] == "unavailable"


def test_revoked_token_stops_at_once(api, make_sku, make_buyers):
    from rest_framework.authtoken.models import Token

    sku = make_sku(stock=5, per_user_limit=5)
    (user, token), = make_buyers(1)
    assert buy(api(token), sku.sku_id, "a").status_code == 202
    Token.objects.filter(key=token).delete()
    r = buy(api(token), sku.sku_id, "b")
    assert r.status_code == 401
    user.refresh_from_db()
    new = Token.objects.create(user=user)
    assert buy(api(new.key), sku.sku_id, "c").status_code == 202
    user.is_active = False
    user.save()
    assert buy(api(new.key), sku.sku_id, "d").status_code == 401


def test_token_records_rebuilt_after_redis_loss(api, make_sku, make_buyers):
    sku = make_sku(stock=5)
    (_, token), = make_buyers(1)
    from accounts.token_cache import token_keys

    redis().delete(token_keys(token).record)
    assert buy(api(token), sku.sku_id, "a").status_code == 202


def test_list_shows_an_order_still_processing(api, make_sku, make_buyers):
    """No worker here: the order stays in flight, and the list shows it first."""
    sku = make_sku(stock=3, per_user_limit=2)
    (_, token), (_, other) = make_buyers(2)
    with mock.patch("inventory.messages.group_publisher.publish_confirm"):
        first = buy(api(token), sku.sku_id, "one").json()["order_id"]
        second = buy(api(token), sku.sku_id, "two").json()["order_id"]
        buy(api(other), sku.sku_id, "three")
    listed = api(token).get("/api/v1/orders").json()["results"]
    assert {(o["order_id"], o["status"]) for o in listed[:2]} == {(second, "PROCESSING"), (first, "PROCESSING")}
    assert len(listed) == 2  # nobody else's
    gate.undo(sku_id=sku.sku_id, order_id=first)
    gate.undo(sku_id=sku.sku_id, order_id=second)


# --- Idempotency-Key: opaque, case-sensitive, scoped to the user across SKUs ------------

@pytest.mark.worker
def test_keys_that_differ_only_in_case_are_three_orders(api, make_sku, make_buyers, worker):
    sku = make_sku(stock=5, per_user_limit=3)
    (_, token), = make_buyers(1)
    client = api(token)
    ids = [buy(client, sku.sku_id, k).json()["order_id"] for k in ("Key-abc", "KEY-ABC", "key-abc")]
    assert len(set(ids)) == 3
    wait_until(lambda: Order.objects.filter(pk__in=ids, status="PENDING_PAYMENT").count() == 3,
               what="three orders confirmed, none refused")
    for oid in ids:
        assert client.get(f"/api/v1/orders/{oid}").json()["status"] == "PENDING_PAYMENT"
    assert buy(client, sku.sku_id, "KEY-ABC").json()["order_id"] == ids[1]  # each replays its own


def test_the_same_key_for_another_sku_is_422_and_takes_nothing(api, make_sku, make_buyers):
    a, b = make_sku(stock=5), make_sku(stock=5)
    (_, token), = make_buyers(1)
    client = api(token)
    first = buy(client, a.sku_id, "one-key")
    assert first.status_code == 202
    other = buy(client, b.sku_id, "one-key")
    assert other.status_code == 422 and other.json()["code"] == "idempotency_key_reused"
    assert redis_live.live_stock(sku_id=b.sku_id).available == 5
    assert buy(client, a.sku_id, "one-key", qty=2).status_code == 422


@pytest.mark.worker
@pytest.mark.web
def test_the_same_key_for_two_skus_at_the_same_moment_makes_one_order(web, worker, make_sku, make_buyers):
    from testsupport.http import run_parallel

    a, b = make_sku(stock=50), make_sku(stock=50)
    buyers = make_buyers(20)
    jobs = [(tok, sku.sku_id, 1, f"same-{i}") for i, (_, tok) in enumerate(buyers) for sku in (a, b)]
    results = run_parallel(web.port, jobs, threads=len(jobs))  # one request per thread: all at once
    by_key: dict[str, list[tuple[int, dict]]] = {}
    for (_tok, _sku, _q, key), res in zip(jobs, results):
        by_key.setdefault(key, []).append(res)
    accepted = {body["order_id"] for status, body in results if status == 202}
    for key, pair in by_key.items():
        codes = sorted(s for s, _ in pair)
        assert codes == [202, 422], (key, pair)
    assert len(accepted) == 20
    wait_until(lambda: Order.objects.filter(pk__in=accepted, status="PENDING_PAYMENT").count() == 20,
               what="twenty orders, none FAILED")
    assert Order.objects.filter(sku_id__in=[a.sku_id, b.sku_id]).count() == 20


# --- An ambiguous publish ---------------------------------------------------------------

@pytest.mark.worker
def test_a_publish_that_failed_after_the_broker_stored_it_answers_202_when_confirmed(
        api, make_sku, make_buyers, worker):
    """First publish stored, its confirm lost, the worker confirmed it meanwhile:
    the client is told 202 with the order, never "503, nothing taken"."""
    from inventory.messages import group_publisher

    real = group_publisher.publish_confirm
    sku = make_sku(stock=3)
    (_, token), = make_buyers(1)

    def stored_then_lost(reservation, *, deadline):
        real(reservation, deadline=deadline)
        wait_until(lambda: Order.objects.filter(pk=reservation.order_id).exists(), what="worker confirmed it")
        raise TimeoutError("confirm lost")

    with mock.patch("inventory.messages.group_publisher.publish_confirm", side_effect=stored_then_lost):
        r = buy(api(token), sku.sku_id, "ambiguous")
    assert r.status_code == 202, r.json()
    assert Order.objects.get(pk=r.json()["order_id"]).status == "PENDING_PAYMENT"
    settled(sku.sku_id)
    assert_balanced(sku.sku_id)


@pytest.mark.worker
def test_a_503_stays_true_when_the_broker_delivers_the_message_after_redis_lost_the_release(
        api, make_sku, make_buyers, worker):
    """The client was told 503; the broker had the message after all and
    delivers it once Redis has forgotten the release: no order may appear."""
    from inventory.messages import publisher
    from testsupport.purchase import publish, reserve_direct

    sku = make_sku(stock=3)
    (user, token), = make_buyers(1)
    sent: list = []
    with mock.patch("inventory.messages.group_publisher.publish_confirm",
                    side_effect=lambda r, deadline: (sent.append(r), 1 / 0)):
        r = buy(api(token), sku.sku_id, "told-503")
    assert r.status_code == 503
    [reservation] = sent
    redis().delete(redis_keys.sku_keys(sku.sku_id).undone)  # Redis forgets the release
    publisher.publish_confirms([reservation])  # ... and the broker delivers the stored copy
    marker = reserve_direct(sku.sku_id, user.pk, key="after")
    publish(marker)  # one consumer, in order: once this one is confirmed, the first was handled
    wait_until(lambda: Order.objects.filter(pk=marker.order_id).exists(), what="the later message confirmed")
    assert not Order.objects.filter(pk=reservation.order_id).exists()
    settled(sku.sku_id)
    row = assert_balanced(sku.sku_id)
    assert (row.available_stock, row.locked_stock) == (2, 1)


def test_a_replay_whose_mysql_read_fails_is_still_202(api, make_sku, make_buyers):
    """Its stock was taken by the first request: 503 ("nothing taken") would lie."""
    from django.db import OperationalError

    sku = make_sku(stock=3)
    (_, token), = make_buyers(1)
    first = buy(api(token), sku.sku_id, "replayed")
    with mock.patch("orders.selectors.order_get", side_effect=OperationalError(2006, "gone away")):
        again = buy(api(token), sku.sku_id, "replayed")
    assert again.status_code == 202 and again.json()["order_id"] == first.json()["order_id"]
    assert again.json()["replayed"] is True


def test_listing_orders_reads_only_the_callers_reservations(api, make_sku, make_buyers):
    """GET orders costs the same however many other buyers have reservations in flight."""
    sku = make_sku(stock=200, per_user_limit=1)
    buyers = make_buyers(41)
    (_, me), others = buyers[0], buyers[1:]
    with mock.patch("inventory.messages.group_publisher.publish_confirm"):  # no worker: everything stays in flight
        mine = buy(api(me), sku.sku_id, "mine").json()["order_id"]
        for _, tok in others:
            buy(api(tok), sku.sku_id, "theirs")
    with mock.patch("inventory.redis.gate.inflight_find", wraps=gate.inflight_find) as find:
        listed = api(me).get("/api/v1/orders").json()["results"]
    assert [o["order_id"] for o in listed] == [mine] and listed[0]["status"] == "PROCESSING"
    assert sum(len(call.kwargs["candidates"]) for call in find.call_args_list) == 1
    for r in gate.inflight_entries(sku_id=sku.sku_id):
        gate.undo(sku_id=sku.sku_id, order_id=r.order_id)


def test_a_retry_while_the_first_request_is_still_publishing_answers_as_that_request_ends(
        live_db, make_sku, make_buyers, settings):
    """The same key comes again while the first request waits for the broker,
    whose publish then fails: the first answers 503 and undoes its take, so the
    retry must not have been told 202 with that order (it never becomes one).
    It waits until the first has decided, then places afresh."""
    import threading

    from accounts import token_cache
    from core.errors import Unavailable
    from orders.services.place import order_place

    settings.SECKILL_PUBLISH_BUDGET_MS = 1500
    sku = make_sku(stock=5, per_user_limit=5)
    (user, token), = make_buyers(1)
    first_publish_may_fail = threading.Event()
    published: list[str] = []

    def publish(reservation, *, deadline):
        if not published:  # the first request's publish: slow, then the broker is gone
            published.append(reservation.order_id)
            first_publish_may_fail.wait(5)
            raise ConnectionResetError("broker gone")
        published.append(reservation.order_id)

    outcomes: dict[str, object] = {}

    def place(name: str) -> None:
        try:
            prior = token_cache.authorize(token=token, idempotency_key="k").prior
            outcomes[name] = order_place(user_id=user.pk, token=token, sku_id=sku.sku_id, quantity=1,
                                         idempotency_key="k", prior=prior)
        except Exception as exc:  # the outcome is what is asserted
            outcomes[name] = exc

    with mock.patch("inventory.messages.group_publisher.publish_confirm", side_effect=publish):
        first = threading.Thread(target=place, args=("first",))
        first.start()
        wait_until(lambda: published and gate.inflight_entries(sku_id=sku.sku_id), what="first in flight")
        retry = threading.Thread(target=place, args=("retry",))
        retry.start()
        time.sleep(0.3)  # the retry is waiting now; the first request's publish fails
        first_publish_may_fail.set()
        first.join(10)
        retry.join(10)
    assert isinstance(outcomes["first"], Unavailable)
    placed = outcomes["retry"]
    assert not isinstance(placed, Exception), placed
    assert placed.order_id != published[0] and placed.created  # a new order, not the one given up
    assert [r.order_id for r in gate.inflight_entries(sku_id=sku.sku_id)] == [placed.order_id]
