"""SKU reads and health."""
from __future__ import annotations

import json
import time
import uuid
from unittest import mock

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.redis.connection import redis
from core.redis.errors import RedisError
from inventory.domain import SkuFence
from inventory.models import Sku
from inventory.redis import gate, keys as redis_keys, live as redis_live, liveness, snapshots as redis_snapshots
from reconciliation.tasks import ORPHANS_RECOVER_TASK
from testsupport import wait_until
from testsupport.factories import unique


def test_sku_detail_public_and_staff(api, make_sku, make_buyers):
    sku = make_sku(stock=7, per_user_limit=2, price="12.50")
    (_, buyer), = make_buyers(1)
    (_, staff), = make_buyers(1, staff=True)
    public = api(buyer).get(f"/api/v1/skus/{sku.sku_id}").json()
    assert public["available"] == 7 and public["total"] == 7 and public["per_user_limit"] == 2
    assert public["sale_state"] == "on_sale" and "buckets" not in public
    (user, _), = make_buyers(1)
    gate.reserve(sku_id=sku.sku_id, user_id=user.pk, quantity=2, idempotency_key="k", order_id="b" * 32)
    body = api(staff).get(f"/api/v1/skus/{sku.sku_id}").json()
    assert body["available"] == 5  # the live Redis figure
    assert body["buckets"] == {"total": 7, "available": 7, "frozen": 0, "locked": 0, "sold": 0}
    assert body["in_flight"] == 2


def test_sku_not_found_and_list(api, make_sku, make_buyers):
    sku = make_sku(stock=1)
    (_, buyer), = make_buyers(1)
    r = api(buyer).get("/api/v1/skus/NOPE-NOPE")
    assert r.status_code == 404 and r.json()["code"] == "sku_not_found"
    ids = []
    url = "/api/v1/skus"
    while url:
        page = api(buyer).get(url).json()
        ids += [s["sku_id"] for s in page["results"]]
        url = page["next"]
    assert sku.sku_id in ids


@pytest.mark.redis_both
def test_a_sku_redis_never_had_is_loaded_on_read(api, live_db, make_buyers):
    sku = Sku.objects.create(sku_id=unique("N"), name="never loaded", total_stock=3, available_stock=3)
    redis_snapshots.sku_registry_add(sku_id=sku.sku_id)  # as sku_create does
    (_, buyer), = make_buyers(1)
    assert api(buyer).get(f"/api/v1/skus/{sku.sku_id}").json()["available"] == 3
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 3
    assert Sku.objects.get(pk=sku.sku_id).redis_epoch == 1


@pytest.mark.redis_both
def test_a_sku_redis_lost_is_fenced_on_read_and_loaded_when_the_fence_passes(api, make_sku, make_buyers):
    from inventory.services.snapshots import stock_fence_pass

    sku = make_sku(stock=3)
    redis().delete(redis_keys.sku_keys(sku.sku_id).stock)
    (_, buyer), = make_buyers(1)
    assert api(buyer).get(f"/api/v1/skus/{sku.sku_id}").json()["available"] == 3  # MySQL's figure meanwhile
    assert redis_live.live_stock(sku_id=sku.sku_id) is None
    token = redis_snapshots.fence_token(sku_id=sku.sku_id)
    assert token and SkuFence(sku.sku_id) in redis_snapshots.fences_listed()
    assert not stock_fence_pass(sku_id=sku.sku_id, token="someone-else|0")  # not this fence: nothing
    assert redis_live.live_stock(sku_id=sku.sku_id) is None
    assert stock_fence_pass(sku_id=sku.sku_id, token=token)
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 3
    assert redis_snapshots.fence_token(sku_id=sku.sku_id) is None
    assert SkuFence(sku.sku_id) not in redis_snapshots.fences_listed()
    assert Sku.objects.get(pk=sku.sku_id).redis_epoch == 2
    assert not stock_fence_pass(sku_id=sku.sku_id, token=token)  # a copy of a passed fence changes nothing


def _sweeps_just_ran() -> None:
    """As if beat had run every enabled sweep a moment ago."""
    from django_celery_beat.models import PeriodicTask

    for task in PeriodicTask.objects.filter(enabled=True).values_list("task", flat=True):
        liveness.sweep_ran(task=task)


def _health(api):
    from inventory import health

    health._health_cache.clear()
    return api().get("/api/v1/health")


def test_the_health_parts_are_one_list_for_the_answer_the_schema_and_the_command(live_db):
    import io

    from django.core.management import CommandError, call_command

    from inventory import health
    from inventory.api.declarations import COMPONENTS

    health._health_cache.clear()
    assert tuple(health.system_health()) == health.HEALTH_PARTS  # every part, in that order
    assert COMPONENTS["Health"]["required"] == list(health.HEALTH_PARTS)
    with pytest.raises(CommandError, match="invalid choice"):
        call_command("health", "--part", "disk", stdout=io.StringIO())


@pytest.mark.worker
def test_health_ok_and_names_the_failing_part(api, live_db, worker):
    _sweeps_just_ran()
    r = _health(api)
    assert r.status_code == 200 and r.json() == {"mysql": "ok", "redis": "ok", "broker": "ok", "worker": "ok",
                                                 "beat": "ok"}
    with mock.patch("inventory.redis.liveness.ping", side_effect=RedisError("down")):
        r = _health(api)
    assert r.status_code == 503
    assert r.json()["redis"] != "ok" and r.json()["mysql"] == "ok" and r.json()["code"] == "unavailable"
    assert "redis" in r.json()["detail"]


@pytest.mark.worker
def test_health_says_beat_when_the_sweeps_are_late(api, live_db, worker):
    _sweeps_just_ran()
    redis().hset(redis_keys.SWEEPS_KEY, ORPHANS_RECOVER_TASK, 1)
    r = _health(api)
    assert r.status_code == 503 and r.json()["beat"].startswith("error: late: orphans_recover_task")
    assert r.json()["worker"] == "ok"


@pytest.mark.worker
def test_a_killed_worker_turns_health_to_503_within_seconds_and_back(api, live_db, worker):
    _sweeps_just_ran()
    assert _health(api).json()["worker"] == "ok"
    worker.stop(sig=9)
    try:
        wait_until(lambda: _health(api).json()["worker"] != "ok", timeout=15, what="health noticing the worker died")
        assert _health(api).status_code == 503
    finally:
        worker.restart()
    _sweeps_just_ran()
    wait_until(lambda: _health(api).status_code == 200, timeout=30, what="health ok again")


def test_health_names_a_partition_of_the_confirm_stream_that_no_consumer_takes(api, live_db, no_worker,
                                                                              settings):
    """With 3 partitions, a consumer alive on two of them is not enough: the
    third partition's SKUs would wait. Beats of partitions 0 and 1 only."""
    settings.SECKILL_CONFIRM_PARTITIONS = 3
    _sweeps_just_ran()
    redis().delete(redis_keys.CONSUMERS_KEY)  # no beat of an earlier test's worker
    for partition in (0, 1):
        liveness.consumer_beat(identity="w1@test", consuming=True, partition=partition)
    liveness.consumer_beat(identity="w2@test", consuming=True, partition=1)  # a standby
    r = _health(api)
    assert r.status_code == 503 and r.json()["worker"] == (
        "error: no confirm consumer of partition 2 of 3 seen within 5 s"), r.json()
    assert r.json()["broker"] == "ok" and r.json()["mysql"] == "ok"
    liveness.consumer_beat(identity="w2@test", consuming=True, partition=2)
    assert _health(api).json()["worker"] == "ok"
    liveness.consumer_beat(identity="w2@test", consuming=False, partition=2)  # it stopped consuming
    assert _health(api).json()["worker"].startswith("error: no confirm consumer of partition 2 ")
    redis().delete(redis_keys.CONSUMERS_KEY)
    assert _health(api).json()["worker"] == "error: no confirm consumer seen within 5 s"  # as with one queue


def test_health_is_measured_at_most_once_a_second_over_one_broker_connection(api, live_db):
    from inventory import health
    from inventory.messages import broker_probe

    health._health_cache.clear()
    with mock.patch("inventory.redis.liveness.ping", wraps=liveness.ping) as ping:
        started = time.monotonic()
        for _ in range(20):
            api().get("/api/v1/health")
        elapsed = time.monotonic() - started
    # once per second of the loop at most (20 requests take more than a second
    # on a loaded machine): without the cache it would be 20
    assert 1 <= ping.call_count <= int(elapsed) + 1, (ping.call_count, elapsed)
    conns = set()
    for _ in range(3):
        health._health_cache.clear()
        api().get("/api/v1/health")
        conns.add(id(broker_probe._probe.get("conn")))
    assert len(conns) == 1 and None not in conns


def test_schema_is_served(api, live_db):
    r = api().get("/api/schema/")
    assert r.status_code == 200
    assert b"/api/v1/orders" in r.content


def test_a_post_for_an_unknown_sku_is_refused_from_redis(api, make_sku, make_buyers):
    make_sku(stock=1)  # at least one SKU known
    (_, token), = make_buyers(1)
    client = api(token)
    first = client.post("/api/v1/orders", {"sku_id": f"NOPE-{uuid.uuid4().hex}", "quantity": 1}, format="json",
                        HTTP_IDEMPOTENCY_KEY="k0")
    assert first.status_code == 404  # may read the SKU ids once
    with CaptureQueriesContext(connection) as queries:
        for i in range(5):
            r = client.post("/api/v1/orders", {"sku_id": f"NOPE-{uuid.uuid4().hex}", "quantity": 1}, format="json",
                            HTTP_IDEMPOTENCY_KEY=f"k{i + 1}")
            assert r.status_code == 404 and r.json()["code"] == "sku_not_found"
    assert queries.captured_queries == []


def test_a_body_over_the_limit_is_413_and_takes_nothing(api, make_sku, make_buyers):
    sku = make_sku(stock=3)
    (_, token), = make_buyers(1)
    big = json.dumps({"sku_id": sku.sku_id, "quantity": 1, "pad": "x" * 20000})
    r = api(token).post("/api/v1/orders", big, content_type="application/json", HTTP_IDEMPOTENCY_KEY="big")
    assert r.status_code == 413 and r.json()["code"] == "too_large"
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 3
    assert api(token).post("/api/v1/orders", {"sku_id": sku.sku_id, "quantity": 1}, format="json",
                           HTTP_IDEMPOTENCY_KEY="big").status_code == 202  # the key was not claimed


def test_a_non_ascii_metrics_token_is_403(live_db, settings):
    from django.test import Client

    settings.SECKILL_METRICS_TOKEN = "metrics-secret"
    c = Client()
    assert c.get("/reconciliation/metrics", HTTP_AUTHORIZATION="Bearer \xe9t\xe9").status_code == 403
    assert c.get("/reconciliation/metrics", HTTP_AUTHORIZATION="Bearer metrics-secret").status_code == 200


def test_only_a_store_being_down_is_503(api, make_sku, make_buyers):
    from django.db import OperationalError

    sku = make_sku(stock=3)
    (_, token), = make_buyers(1)
    with mock.patch("orders.selectors.order_list", side_effect=ValueError("a bug")):
        bug = api(token).get("/api/v1/orders")
    assert bug.status_code == 500 and bug.json()["code"] == "internal_error"
    with mock.patch("orders.selectors.order_list", side_effect=OperationalError(2006, "gone away")):
        down = api(token).get("/api/v1/orders")
    assert down.status_code == 503 and down.json()["code"] == "unavailable"
    assert api(token).get(f"/api/v1/skus/{sku.sku_id}").status_code == 200
