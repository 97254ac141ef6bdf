"""The confirm stream in partitions (SECKILL_CONFIRM_PARTITIONS=3) against real
workers, a real web tier and the real RabbitMQ: each worker consumes every
partition, each partition has one active consumer and a standby, a sale sells
exactly its stock with every 202 an order, a killed active worker costs nothing,
and the claims fence waits for the copy of every partition."""
from __future__ import annotations

import contextlib
import json
import subprocess
import time
import uuid

import pytest
from django.conf import settings as django_settings
from kombu import Connection, Consumer

from accounts import token_cache
from core.redis.shards import shards
from inventory.domain import ClaimsFence
from inventory.messages import broker_probe, encoding, queues
from inventory.redis import snapshots as redis_snapshots
from inventory.services.skus import sku_create
from orders.models import Order
from testsupport import wait_until
from testsupport.faults import sell_during
from testsupport.http import accepted_ids, run_parallel
from testsupport.processes import start_web, start_worker
from testsupport.stores import every_unit_taken_is_a_202

pytestmark = [pytest.mark.worker, pytest.mark.web, pytest.mark.usefixtures("no_worker")]

PARTITIONS = 3


@pytest.fixture
def partitioned(settings, process_env):
    """This process and the processes it starts run 3 partitions."""
    settings.SECKILL_CONFIRM_PARTITIONS = PARTITIONS
    return dict(process_env, SECKILL_CONFIRM_PARTITIONS=str(PARTITIONS))


def skus_in_every_partition(per: int, stock: int) -> list[str]:
    """`per` new SKUs in each partition."""
    found: dict[int, list[str]] = {k: [] for k in range(PARTITIONS)}
    while any(len(v) < per for v in found.values()):
        sku_id = f"P-{uuid.uuid4().hex[:10]}"
        if len(found[queues.partition_of(sku_id)]) < per:
            found[queues.partition_of(sku_id)].append(sku_id)
    out = [s for k in range(PARTITIONS) for s in found[k]]
    for sku_id in out:
        sku_create(sku_id=sku_id, stock=stock, per_user_limit=1)
    return out


def consumers_of(queue: str) -> list[dict]:
    """The queue's consumers as RabbitMQ has them: tag (worker and partition) and
    whether it is the single active one."""
    out = subprocess.run(["rabbitmqctl", "list_consumers", "-q", "--formatter", "json", "queue_name",
                          "consumer_tag", "active"], capture_output=True, text=True, check=True, timeout=60).stdout
    return [c for c in json.loads(out) if c["queue_name"] == queue]


def active_worker(partition: int) -> str:
    """The worker name (-n) whose consumer is active on the partition."""
    active = [c["consumer_tag"] for c in consumers_of(queues.confirm_queue_name(partition)) if c["active"]]
    assert len(active) == 1, active
    return active[0].split("@", 1)[0]


def test_a_sale_of_skus_in_every_partition_sells_exactly_the_stock_and_every_202_is_an_order(
        partitioned, make_buyers):
    skus = skus_in_every_partition(per=2, stock=12)
    buyers = make_buyers(30)
    worker = start_worker(partitioned, name=f"parts-{uuid.uuid4().hex[:6]}")
    web = start_web(partitioned, name="web-partitions")
    try:
        for k in range(PARTITIONS):  # one consumer per partition, the worker's
            assert [c["active"] for c in consumers_of(queues.confirm_queue_name(k))] == [True]
        jobs = [(token, sku, 1, uuid.uuid4().hex) for _, token in buyers for sku in skus]
        results = run_parallel(web.port, jobs, threads=24)
        assert {s for s, _ in results} <= {202, 409}, {s for s, _ in results}
        accepted = accepted_ids(results)
        assert len(accepted) == 12 * len(skus)  # every SKU sold out, exactly
        confirmed: set[str] = set()
        for sku in skus:
            wait_until(lambda sku=sku: Order.objects.filter(sku_id=sku, status=Order.Status.PENDING_PAYMENT)
                       .count() == 12, timeout=30, what=f"the orders of {sku}")
            ids = set(Order.objects.filter(sku_id=sku).values_list("order_id", flat=True))
            every_unit_taken_is_a_202(sku, ids)
            confirmed |= ids
        assert confirmed == accepted  # every 202 is an order, and every order a 202
        assert broker_probe.confirm_queue_depth().messages == 0
    finally:
        web.stop()
        worker.stop()


def test_two_workers_each_partition_one_active_consumer_and_the_standby_takes_over_with_nothing_lost(
        partitioned, make_buyers):
    first = start_worker(partitioned, name=f"parta-{uuid.uuid4().hex[:6]}")
    second = start_worker(partitioned, name=f"partb-{uuid.uuid4().hex[:6]}")
    workers = {w.args[w.args.index("-n") + 1].split("@")[0]: w for w in (first, second)}
    web = start_web(partitioned, name="web-partitions-failover")
    try:
        for k in range(PARTITIONS):
            consumers = consumers_of(queues.confirm_queue_name(k))
            assert sorted(c["consumer_tag"].split("@")[0] for c in consumers) == sorted(workers)
            assert sum(1 for c in consumers if c["active"]) == 1  # the other stands by
        sku, = skus_in_every_partition(per=1, stock=60)[:1]
        partition = queues.partition_of(sku)
        victim = active_worker(partition)
        standby = next(n for n in workers if n != victim)
        tokens = [t for _, t in make_buyers(90)]
        results = sell_during(lambda: workers[victim].stop(sig=9), web.port, tokens, sku, after_taken=15)
        accepted = accepted_ids(results)
        assert len(accepted) == 60 and {s for s, _ in results} <= {202, 409}
        every_unit_taken_is_a_202(sku, accepted)  # the standby confirmed what the killed one held
        for k in range(PARTITIONS):
            wait_until(lambda k=k: [c["consumer_tag"].split("@")[0] for c in
                                    consumers_of(queues.confirm_queue_name(k))] == [standby],
                       timeout=30, what=f"partition {k} left to the standby")
            assert active_worker(k) == standby
    finally:
        web.stop()
        first.stop()
        second.stop()


def test_the_claims_fence_waits_for_the_copy_of_every_partition(partitioned):
    """Partition 2's active consumer is this test's, which holds what it gets:
    the worker passes the claims fence's copies of partitions 0 and 1, and the
    fence stands until the held copy goes to the worker's standby of 2."""
    shard = shards()[0]
    fence = token_cache.claims_fence_key(shard.tag)
    passed = token_cache.claims_fence_passed_key(fence)
    held: list = []
    with Connection(django_settings.CELERY_BROKER_URL) as conn:
        channel = conn.channel()
        queue = queues.confirm_queue(2)(channel)
        queue.declare()
        Consumer(channel, queues=[queue], on_message=held.append, no_ack=False, accept=None).consume()
        worker = start_worker(partitioned, name=f"partc-{uuid.uuid4().hex[:6]}")
        try:
            assert [c["active"] for c in consumers_of(queue.name)] == [True, False]  # ours, then the worker's
            token = token_cache.tokens_distrust(shard=shard, delay_ms=0)
            redis_snapshots.fence_list(standing=redis_snapshots.StandingFence(ClaimsFence(shard.tag), token))

            def copy_held() -> bool:
                with contextlib.suppress(TimeoutError):
                    conn.drain_events(timeout=0.2)
                return any(encoding.message_decode(m.body, m.headers).fences for m in held)

            wait_until(copy_held, timeout=20, what="partition 2's copy of the claims fence")
            wait_until(lambda: shard.client.smembers(passed) == {b"0", b"1"}, timeout=20,
                       what="partitions 0 and 1 passed")
            time.sleep(1.0)  # and copies sent again meanwhile change nothing
            assert shard.client.get(fence) is not None
        except BaseException:
            worker.stop()
            raise
    # our consumer gone, unacknowledged: the worker's standby of partition 2 gets the copy
    try:
        wait_until(lambda: shard.client.get(fence) is None, timeout=20, what="the claims fence lifted")
        assert not shard.client.exists(passed)
        assert ClaimsFence(shard.tag) not in redis_snapshots.fences_listed()
    finally:
        worker.stop()
