"""Reconciliation against the real servers: repairs only what is safe, finds what fell between."""
from __future__ import annotations

import subprocess
import threading
import time
import uuid

import pytest

from conftest import start_worker, wait_until
from inventory import redis_store
from inventory.models import InventoryLog, Sku
from inventory.tests.helpers import assert_balanced, settled
from orders.models import Order
from reconciliation.models import Finding, SkuReconciliation
from reconciliation.services import reconciliation_run

REPAIRS = {Finding.Kind.DRIFT_LOWERED, Finding.Kind.DRIFT_RAISED}


def run_for(sku_id):
    run = reconciliation_run(trigger="command", observe_gap_s=0.05, sku_ids=[sku_id])
    row = SkuReconciliation.objects.get(run=run, sku_id=sku_id)
    return run, row, list(run.findings.filter(sku_id=sku_id))


def test_redis_above_mysql_is_lowered_at_once(make_sku, live_db):
    sku = make_sku(stock=10)
    redis_store.redis().hincrby(redis_store.sku_keys(sku.sku_id).stock, "available", 3)
    run, row, findings = run_for(sku.sku_id)
    assert (row.drift, row.state) == (3, "repaired")
    assert [f.kind for f in findings] == [Finding.Kind.DRIFT_LOWERED]
    assert (findings[0].redis_value, findings[0].mysql_value) == (13, 10)
    assert redis_store.live_stock(sku_id=sku.sku_id).available == 10
    assert InventoryLog.objects.filter(sku_id=sku.sku_id, operation="REPAIR", quantity=3).exists()
    _, row, _ = run_for(sku.sku_id)
    assert row.drift == 0


def test_redis_below_mysql_is_raised_only_when_stable_across_runs(make_sku, live_db):
    sku = make_sku(stock=10)
    redis_store.redis().hincrby(redis_store.sku_keys(sku.sku_id).stock, "available", -2)
    _, row, findings = run_for(sku.sku_id)
    assert (row.drift, row.state) == (-2, "alert")
    assert [f.kind for f in findings] == [Finding.Kind.DRIFT_ALERT]
    assert redis_store.live_stock(sku_id=sku.sku_id).available == 8  # no raise on one run's word
    _, row, findings = run_for(sku.sku_id)
    assert [f.kind for f in findings] == [Finding.Kind.DRIFT_RAISED]
    assert redis_store.live_stock(sku_id=sku.sku_id).available == 10


def test_redis_that_lost_the_sku_is_rebuilt(make_sku, live_db):
    sku = make_sku(stock=7)
    keys = redis_store.sku_keys(sku.sku_id)
    redis_store.redis().delete(keys.stock, keys.buyers, keys.idem)
    _, row, findings = run_for(sku.sku_id)
    assert row.state == "rebuilt" and [f.kind for f in findings] == [Finding.Kind.SNAPSHOT_REBUILT]
    assert redis_store.live_stock(sku_id=sku.sku_id).available == 7


def test_in_flight_and_unapplied_gives_are_no_drift(make_sku, make_buyers, live_db):
    """A reservation not yet confirmed and a give not yet applied are expected, not drift."""
    sku = make_sku(stock=10)
    (user, _), = make_buyers(1)
    redis_store.reserve(sku_id=sku.sku_id, user_id=user.pk, quantity=1, idempotency_key="k",
                        order_id=uuid.uuid4().hex)
    _, row, findings = run_for(sku.sku_id)
    assert (row.in_flight, row.drift, findings) == (1, 0, [])


# --- faults, with real processes ---------------------------------------------------

def sell(web_port, tokens, sku_id, n_threads=24):
    from orders.tests.test_concurrency import run_parallel

    jobs = [(t, sku_id, 1, uuid.uuid4().hex) for t in tokens]
    return run_parallel(web_port, jobs, threads=n_threads)


def sell_during(fault, web_port, tokens, sku_id, n_threads=24):
    """Run a sale while `fault` (a callable) runs in another thread."""
    t = threading.Thread(target=fault)
    t.start()
    try:
        return sell(web_port, tokens, sku_id, n_threads=n_threads)
    finally:
        t.join()


def no_loss(sku_id, results, stock):
    """Every 202 is an order in MySQL; nothing oversold; the stores agree after reconciling."""
    accepted = {b["order_id"] for s, b in results if s == 202}
    assert {s for s, _ in results} <= {202, 409, 503}
    wait_until(lambda: set(Order.objects.filter(pk__in=accepted).values_list("order_id", flat=True)) == accepted,
               timeout=60, what="every accepted order in MySQL")
    settled(sku_id, timeout=60)
    row = Sku.objects.get(pk=sku_id)
    held = Order.objects.filter(sku_id=sku_id, status="PENDING_PAYMENT").count()
    assert row.locked_stock == held <= stock
    assert row.total_stock == row.available_stock + row.frozen_stock + row.locked_stock + row.sold_stock
    run_for(sku_id)
    _, last, _ = run_for(sku_id)
    assert last.drift == 0
    return accepted


@pytest.mark.worker
@pytest.mark.web
def test_reconciling_during_a_sale_makes_no_false_repair(web, worker, make_sku, make_buyers):
    sku = make_sku(stock=150, per_user_limit=1)
    buyers = make_buyers(300)
    runs, stop = [], threading.Event()

    def reconciler():
        from django.db import connection

        try:
            while not stop.is_set():
                runs.append(reconciliation_run(trigger="command", observe_gap_s=0.05, sku_ids=[sku.sku_id]))
        finally:
            connection.close()

    t = threading.Thread(target=reconciler)
    t.start()
    results = sell(web.port, [tok for _, tok in buyers], sku.sku_id)
    stop.set()
    t.join()
    assert len(runs) >= 2
    repairs = Finding.objects.filter(run__in=runs, sku_id=sku.sku_id, kind__in=REPAIRS)
    assert not repairs.exists(), list(repairs.values_list("kind", "detail"))
    assert len(no_loss(sku.sku_id, results, 150)) == 150
    assert_balanced(sku.sku_id)


@pytest.mark.worker
@pytest.mark.web
def test_redis_flushed_during_a_sale_loses_nothing_and_oversells_nothing(web, worker, make_sku, make_buyers):
    sku = make_sku(stock=80, per_user_limit=1)
    buyers = make_buyers(200)
    tokens = [tok for _, tok in buyers]

    def flush_midway():
        time.sleep(0.4)
        redis_store.redis().flushdb()

    results = sell_during(flush_midway, web.port, tokens, sku.sku_id)
    accepted = no_loss(sku.sku_id, results, 80)
    failed = Order.objects.filter(pk__in=accepted, status="FAILED").count()
    held = Order.objects.filter(pk__in=accepted, status="PENDING_PAYMENT").count()
    assert held + failed == len(accepted) and held <= 80
    assert_balanced(sku.sku_id)


@pytest.mark.worker
def test_worker_killed_mid_batch_confirms_everything_once(worker, process_env, make_sku, make_buyers):
    from inventory.services import Reservation
    from inventory.tasks import publish_confirms

    sku = make_sku(stock=300, per_user_limit=1)
    buyers = make_buyers(300)
    victim = start_worker(process_env, concurrency=2, name="victim")
    reservations = []
    for user, _ in buyers:
        oid = uuid.uuid4().hex
        redis_store.reserve(sku_id=sku.sku_id, user_id=user.pk, quantity=1, idempotency_key="k", order_id=oid)
        reservations.append(Reservation(oid, sku.sku_id, user.pk, 1, "k", 0))
    for r in reservations:  # one message each, as the web path sends them
        publish_confirms([r])
    time.sleep(0.15)
    victim.stop(sig=9)
    ids = [r.order_id for r in reservations]
    wait_until(lambda: Order.objects.filter(pk__in=ids).count() == 300, timeout=60, what="all 300 confirmed")
    settled(sku.sku_id, timeout=60)
    row = assert_balanced(sku.sku_id)
    assert (row.available_stock, row.locked_stock) == (0, 300)
    assert InventoryLog.objects.filter(sku_id=sku.sku_id, operation="DECR").count() == 300


@pytest.mark.worker
@pytest.mark.web
def test_rabbitmq_stopped_and_started_during_a_sale(web, worker, make_sku, make_buyers):
    sku = make_sku(stock=60, per_user_limit=1)
    buyers = make_buyers(160)
    tokens = [tok for _, tok in buyers]

    def bounce():
        time.sleep(0.3)
        subprocess.run(["rabbitmqctl", "stop_app"], check=True, capture_output=True, timeout=60)
        time.sleep(2)
        subprocess.run(["rabbitmqctl", "start_app"], check=True, capture_output=True, timeout=120)

    results = sell_during(bounce, web.port, tokens[:120], sku.sku_id, n_threads=12)
    results += sell(web.port, tokens[120:], sku.sku_id, n_threads=12)
    codes = [s for s, _ in results]
    assert codes.count(202) >= 1
    # messages the broker lost while going down come back through the orphan sweep
    from reconciliation.services import orphans_recover

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and redis_store.inflight_entries(sku_id=sku.sku_id):
        orphans_recover(grace_seconds=2, sku_ids=[sku.sku_id])
        time.sleep(2)
    no_loss(sku.sku_id, results, 60)
    assert_balanced(sku.sku_id)


def redis_restart_empty() -> None:
    """Start Redis again the way scripts/lib.sh does (nothing kept on disk)."""
    subprocess.run(["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "--port", "6379", "--save", "",
                    "--appendonly", "no", "--dir", "/tmp", "--logfile", "/tmp/seckill-test-redis.log"],
                   check=True, timeout=30)

    def up() -> bool:
        try:
            return bool(redis_store.redis().ping())
        except redis_store.RedisError:
            return False

    wait_until(up, timeout=30, what="Redis back")


@pytest.mark.worker
def test_redis_stopped_while_messages_wait_loses_no_order(worker, make_sku, make_buyers):
    """Redis goes away with reservations in flight: the messages alone finish them."""
    from inventory.services import Reservation, stock_warm
    from inventory.tasks import publish_confirms

    sku = make_sku(stock=30, per_user_limit=1)
    buyers = make_buyers(20)
    reservations = []
    for user, _ in buyers:
        oid = uuid.uuid4().hex
        redis_store.reserve(sku_id=sku.sku_id, user_id=user.pk, quantity=1, idempotency_key="k", order_id=oid)
        reservations.append(Reservation(oid, sku.sku_id, user.pk, 1, "k", 0))
    try:
        redis_store.redis().shutdown(nosave=True)
    except redis_store.RedisError:
        pass  # the connection drops as the server stops
    try:
        for r in reservations:
            publish_confirms([r])
        ids = [r.order_id for r in reservations]
        wait_until(lambda: Order.objects.filter(pk__in=ids, status="PENDING_PAYMENT").count() == 20, timeout=60,
                   what="confirmed from the messages while Redis is down")
    finally:
        redis_restart_empty()
    assert stock_warm(sku_id=sku.sku_id)
    row = assert_balanced(sku.sku_id)
    assert (row.available_stock, row.locked_stock) == (10, 20)
    assert InventoryLog.objects.filter(sku_id=sku.sku_id, operation="DECR").count() == 20


def mariadb_restart(down_s: float) -> None:
    subprocess.run(["mariadb-admin", "-uroot", "-h127.0.0.1", "shutdown"], check=True, timeout=60)
    time.sleep(down_s)
    subprocess.run(["start-stop-daemon", "--start", "--oknodo", "--background", "--exec", "/usr/sbin/mariadbd",
                    "--", "--user=mysql"], check=True, timeout=30)

    def up() -> bool:
        return subprocess.run(["mariadb-admin", "-uroot", "-h127.0.0.1", "ping"], capture_output=True).returncode == 0

    wait_until(up, timeout=60, what="MariaDB back")


@pytest.mark.worker
@pytest.mark.web
def test_mysql_stopped_during_a_sale_loses_nothing(web, worker, make_sku, make_buyers):
    """The purchase path needs no MySQL; the confirms wait for it and then finish."""
    from django.db import connection

    sku = make_sku(stock=50, per_user_limit=1)
    buyers = make_buyers(120)
    tokens = [tok for _, tok in buyers]
    sell(web.port, tokens[:5], sku.sku_id)  # token records are in Redis now
    connection.close()
    results = sell_during(lambda: mariadb_restart(3.0), web.port, tokens[5:], sku.sku_id, n_threads=12)
    connection.close()
    accepted = {b["order_id"] for s, b in results if s == 202}
    assert len(accepted) >= 1
    no_loss(sku.sku_id, results, 50)
    assert_balanced(sku.sku_id)
