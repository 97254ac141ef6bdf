"""The confirm consumer through faults, with real worker and web processes: every
accepted reservation becomes exactly one order, whatever lands in between."""
from __future__ import annotations

import time

import pytest
from django.conf import settings
from django.db import connection

from benchmarks.faults import mariadb_restart, redis_start_empty, redis_stop
from core.redis.connection import redis
from inventory.models import DeadLetter, InventoryLog, Sku
from inventory.redis import gate, keys as redis_keys, snapshots as redis_snapshots
from orders.models import Order
from testsupport import wait_until
from testsupport.faults import RowHold, rabbitmq_restart, sell_during
from testsupport.http import accepted_ids, sell
from testsupport.processes import start_worker
from testsupport.purchase import publish, rebuild_lost, reserve_direct
from testsupport.stores import assert_balanced, rabbitmq_queue, settled

# The broker's, the worker's and MySQL's faults are the same on either kind of
# Redis: on one Redis only, but for a batch split in the consumer, which holds,
# settles and gives back in Redis (`redis_both`: on the cluster too). A cluster
# node's loss while confirms wait is orders/tests/test_redis_cluster.py's.
pytestmark = pytest.mark.worker


def unacked() -> int:
    return int(rabbitmq_queue(settings.SECKILL_CONFIRM_QUEUE).get("messages_unacknowledged", 0))


def all_confirmed(ids, timeout=60) -> None:
    ids = list(ids)
    wait_until(lambda: Order.objects.filter(pk__in=ids).exclude(status="FAILED").count() == len(ids),
               timeout=timeout, what=f"all {len(ids)} reservations confirmed")


def test_consumer_survives_repeated_broker_restarts_with_messages_buffered(worker, make_sku, make_buyers):
    """RabbitMQ restarts three times while the consumer holds unacknowledged
    messages; after each restart a new sale is confirmed by the same worker,
    without any sweep's help (the celery-batches wedge of issue 8)."""
    sku = make_sku(stock=400, per_user_limit=400)
    (user, _), = make_buyers(1)
    pid = worker.popen.pid
    for _round in range(3):
        held = [reserve_direct(sku.sku_id, user.pk) for _ in range(30)]
        with RowHold(sku.sku_id):
            publish(*held)
            wait_until(lambda: unacked() >= 30, timeout=30, what="the consumer holding the batch")
            rabbitmq_restart()
        after = [reserve_direct(sku.sku_id, user.pk) for _ in range(20)]
        publish(*after)
        all_confirmed([r.order_id for r in held + after], timeout=90)
        assert worker.popen.pid == pid and worker.popen.poll() is None
    settled(sku.sku_id)
    row = assert_balanced(sku.sku_id)
    assert (row.locked_stock, row.available_stock) == (150, 250)
    assert InventoryLog.objects.filter(sku_id=sku.sku_id, operation="DECR").count() == 150


def test_worker_killed_while_holding_a_batch_confirms_everything_once(worker, process_env, make_sku, make_buyers):
    sku = make_sku(stock=300, per_user_limit=1)
    buyers = make_buyers(300)
    reservations = [reserve_direct(sku.sku_id, user.pk, key="k") for user, _ in buyers]
    worker.stop()  # one active consumer per queue: the victim takes over
    victim = start_worker(process_env, concurrency=2, name="victim")
    try:
        with RowHold(sku.sku_id):
            publish(*reservations)  # one message each, as the web path sends them
            wait_until(lambda: unacked() >= 100, timeout=30, what="the victim holding messages")
            victim.stop(sig=9)
        assert not Order.objects.filter(sku_id=sku.sku_id).exists()  # it died before committing
    finally:
        worker.restart()
    all_confirmed([r.order_id for r in reservations])
    settled(sku.sku_id, timeout=60)
    row = assert_balanced(sku.sku_id)
    assert (row.available_stock, row.locked_stock) == (0, 300)
    assert InventoryLog.objects.filter(sku_id=sku.sku_id, operation="DECR").count() == 300


@pytest.mark.redis_both
def test_a_batch_that_fails_for_good_sets_aside_only_the_bad_reservation(worker, make_sku, make_buyers):
    """A non-transient failure (here a key longer than its column) is not
    retried forever: the batch is split until the one bad reservation is
    alone, that one becomes a dead letter, and the rest are confirmed."""
    sku = make_sku(stock=20, per_user_limit=20)
    (user, _), = make_buyers(1)
    good = [reserve_direct(sku.sku_id, user.pk) for _ in range(9)]
    bad = reserve_direct(sku.sku_id, user.pk, key="x" * 100)
    messages_ = good[:5] + [bad] + good[5:]
    from inventory.messages import publisher

    publisher.publish_confirms(messages_)  # one message: one batch
    all_confirmed([r.order_id for r in good])
    wait_until(lambda: DeadLetter.objects.filter(payload__order_id=bad.order_id).exists(), what="bad one set aside")
    settled(sku.sku_id)
    row = assert_balanced(sku.sku_id)  # the bad one's unit went back to Redis
    assert (row.available_stock, row.locked_stock) == (11, 9)
    assert not Order.objects.filter(pk=bad.order_id).exists()


@pytest.mark.web
def test_rabbitmq_stopped_and_started_during_a_sale(web, worker, make_sku, make_buyers):
    from reconciliation.services import orphans_recover

    sku = make_sku(stock=60, per_user_limit=1)
    buyers = make_buyers(160)
    tokens = [tok for _, tok in buyers]

    results = sell_during(rabbitmq_restart, web.port, tokens[:120], sku.sku_id, n_threads=12)
    results += sell(web.port, tokens[120:], sku.sku_id, n_threads=12)
    codes = [s for s, _ in results]
    assert set(codes) <= {202, 409, 503} and codes.count(202) >= 1
    # a message the broker lost while going down comes back through the orphan sweep
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and gate.inflight_entries(sku_id=sku.sku_id):
        orphans_recover(sku_ids=[sku.sku_id], ahead_s=15)
        time.sleep(2)
    no_loss(sku.sku_id, results, 60)


def no_loss(sku_id, results, stock):
    """Every 202 is an order in MySQL, none FAILED; nothing oversold; the stores agree."""
    from reconciliation.tests.test_reconcile import run_for

    accepted = accepted_ids(results)
    all_confirmed(accepted)
    settled(sku_id, timeout=60)
    row = Sku.objects.get(pk=sku_id)
    held = Order.objects.filter(sku_id=sku_id, status="PENDING_PAYMENT").count()
    assert row.locked_stock == held <= stock
    assert set(Order.objects.filter(sku_id=sku_id).exclude(status="FAILED")
               .values_list("order_id", flat=True)) == accepted
    run_for(sku_id)
    _, last, _ = run_for(sku_id)
    assert last.drift == 0
    assert_balanced(sku_id)
    return accepted


def test_redis_stopped_while_messages_wait_loses_no_order(worker, make_sku, make_buyers):
    """Redis goes away with reservations in flight: the messages alone finish them."""
    from inventory.services.snapshots import Warm, stock_warm

    sku = make_sku(stock=30, per_user_limit=1)
    buyers = make_buyers(20)
    reservations = [reserve_direct(sku.sku_id, user.pk, key="k") for user, _ in buyers]
    redis_stop()
    try:
        publish(*reservations)
        ids = [r.order_id for r in reservations]
        wait_until(lambda: Order.objects.filter(pk__in=ids, status="PENDING_PAYMENT").count() == 20, timeout=60,
                   what="confirmed from the messages while Redis is down")
    finally:
        redis_start_empty()
    # Redis came back empty: the SKU is fenced, and the worker rebuilds it once
    # the fence has come through the confirm queue
    assert stock_warm(sku_id=sku.sku_id) is Warm.FENCED
    wait_until(lambda: redis_snapshots.snapshot_exists(sku_id=sku.sku_id), timeout=30, what="rebuilt behind the fence")
    row = assert_balanced(sku.sku_id)
    assert (row.available_stock, row.locked_stock) == (10, 20)
    assert InventoryLog.objects.filter(sku_id=sku.sku_id, operation="DECR").count() == 20


@pytest.mark.web
def test_mysql_stopped_during_a_sale_loses_nothing(web, worker, make_sku, make_buyers):
    """The purchase path needs no MySQL; the confirms wait for it and then finish."""
    sku = make_sku(stock=50, per_user_limit=1)
    buyers = make_buyers(120)
    tokens = [tok for _, tok in buyers]
    results = sell(web.port, tokens[:5], sku.sku_id)  # token records are in Redis now
    connection.close()
    results += sell_during(lambda: mariadb_restart(3.0), web.port, tokens[5:], sku.sku_id, n_threads=12)
    connection.close()
    assert len(accepted_ids(results)) >= 1
    no_loss(sku.sku_id, results, 50)


def test_a_task_running_when_the_broker_restarts_does_not_end_the_worker(process_env, no_worker, make_sku,
                                                                         make_buyers):
    """The threads pool cannot cancel a running task; asked to on a connection
    loss, Celery used to end the whole worker (celery/celery#7185). A give that
    waits for its snapshot runs for seconds: RabbitMQ restarts meanwhile, and
    the worker must go on (the give's message comes again; gives are idempotent)."""
    import uuid

    from inventory.services import stock

    w = start_worker(process_env, name=f"pool-{uuid.uuid4().hex[:4]}")
    try:
        sku = make_sku(stock=3)
        redis().delete(redis_keys.sku_keys(sku.sku_id).stock)  # the give will wait for a snapshot
        stock.stock_restock(sku_id=sku.sku_id, quantity=2, reason="more", actor="t")
        wait_until(lambda: "stock_gives_task" in w.log_text() and "received" in w.log_text(), timeout=30,
                   what="the give task running")
        rabbitmq_restart()
        time.sleep(2)
        assert w.popen.poll() is None, w.log_text()[-3000:]
        assert "does not implement kill_job" not in w.log_text()
        # and it still works: a reservation published now becomes an order
        rebuild_lost(sku.sku_id)
        (user, _), = make_buyers(1)
        r = reserve_direct(sku.sku_id, user.pk)
        publish(r)
        wait_until(lambda: Order.objects.filter(pk=r.order_id, status="PENDING_PAYMENT").exists(), timeout=60,
                   what="confirmed after the broker restart")
    finally:
        w.stop()
