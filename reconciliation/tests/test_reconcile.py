"""Reconciliation against the real servers: repairs only what is safe, finds what fell between."""
from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from core.redis.connection import redis
from core.redis.errors import RedisError
from inventory.models import InventoryLog, Sku
from inventory.redis import gate, keys as redis_keys, live as redis_live, snapshots as redis_snapshots
from orders.models import Order
from orders.services.confirm import STOCK_REFUSAL
from reconciliation import services
from reconciliation.lease import Lease, LeaseLost, ReconciliationBusy, run_lease
from reconciliation.models import Finding, RunLease, SkuReconciliation
from reconciliation.services import reconciliation_run
from testsupport import wait_until
from testsupport.faults import sell_during
from testsupport.http import accepted_ids, sell
from testsupport.purchase import fence_reached, reserve_direct
from testsupport.stores import assert_balanced, settled

pytestmark = pytest.mark.mariadb_both  # again on the Galera cluster in the cluster leg

REPAIRS = {Finding.Kind.DRIFT_LOWERED, Finding.Kind.DRIFT_RAISED}


def run_for(sku_id):
    run = reconciliation_run(trigger="command", observe_gap_s=0.05, sku_ids=[sku_id])
    row = SkuReconciliation.objects.get(run=run, sku_id=sku_id)
    return run, row, list(run.findings.filter(sku_id=sku_id))


@pytest.mark.redis_both
def test_redis_above_mysql_is_lowered_at_once(make_sku, live_db):
    sku = make_sku(stock=10)
    redis().hincrby(redis_keys.sku_keys(sku.sku_id).stock, "available", 3)
    run, row, findings = run_for(sku.sku_id)
    assert (row.drift, row.state) == (3, "repaired")
    assert [f.kind for f in findings] == [Finding.Kind.DRIFT_LOWERED]
    assert (findings[0].redis_value, findings[0].mysql_value) == (13, 10)
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 10
    assert InventoryLog.objects.filter(sku_id=sku.sku_id, operation="REPAIR", quantity=3).exists()
    _, row, _ = run_for(sku.sku_id)
    assert row.drift == 0


@pytest.mark.redis_both
def test_redis_below_mysql_is_raised_only_when_stable_across_runs(make_sku, live_db):
    sku = make_sku(stock=10)
    redis().hincrby(redis_keys.sku_keys(sku.sku_id).stock, "available", -2)
    _, row, findings = run_for(sku.sku_id)
    assert (row.drift, row.state) == (-2, "alert")
    assert [f.kind for f in findings] == [Finding.Kind.DRIFT_ALERT]
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 8  # no raise on one run's word
    _, row, findings = run_for(sku.sku_id)
    assert [f.kind for f in findings] == [Finding.Kind.DRIFT_RAISED]
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 10


@pytest.mark.redis_both
def test_redis_that_lost_the_sku_is_rebuilt(make_sku, live_db):
    sku = make_sku(stock=7)
    keys = redis_keys.sku_keys(sku.sku_id)
    redis().delete(keys.stock, keys.buyers, keys.idem)
    _, row, findings = run_for(sku.sku_id)
    assert row.state == "rebuilt" and [f.kind for f in findings] == [Finding.Kind.SNAPSHOT_REBUILT]
    # Redis had it before: the rebuild is fenced behind the confirm queue, not loaded at once
    assert not findings[0].repaired and "fenced" in findings[0].detail
    assert redis_live.live_stock(sku_id=sku.sku_id) is None
    fence_reached(sku.sku_id)
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 7
    _, row, findings = run_for(sku.sku_id)
    assert (row.state, row.drift, findings) == ("ok", 0, [])


def test_in_flight_and_unapplied_gives_are_no_drift(make_sku, make_buyers, live_db):
    """A reservation not yet confirmed and a give not yet applied are expected, not drift."""
    sku = make_sku(stock=10)
    (user, _), = make_buyers(1)
    reserve_direct(sku.sku_id, user.pk)
    _, row, findings = run_for(sku.sku_id)
    assert (row.in_flight, row.drift, findings) == (1, 0, [])
    keys = redis_keys.sku_keys(sku.sku_id)
    redis().delete(keys.inflight, keys.due)



def test_a_failed_order_still_in_flight_counts_as_in_flight(make_sku, make_buyers, live_db):
    """MySQL took nothing for a FAILED order: until it is settled, its
    reservation is still Redis's alone, not drift."""
    from orders.services.confirm import confirm_in_mysql

    sku = make_sku(stock=3)
    (user, _), = make_buyers(1)
    Sku.objects.filter(pk=sku.sku_id).update(available_stock=0, frozen_stock=3)  # MySQL will refuse
    redis().hset(redis_keys.sku_keys(sku.sku_id).stock, "available", 3)
    res = reserve_direct(sku.sku_id, user.pk)
    decision = confirm_in_mysql(sku_id=sku.sku_id, batch=[res])
    assert decision.refused[0][1] == STOCK_REFUSAL
    m = services.sku_measure(sku_id=sku.sku_id)
    assert (m.in_flight, m.redis_available, m.expected) == (1, 2, -1)
    # the settle does not give the unit back (Redis was above the truth) and the drift is real: 2 over
    gate.settle(sku_id=sku.sku_id, confirmed=[], dropped=[res.order_id])
    assert services.sku_measure(sku_id=sku.sku_id).drift == 2


def test_a_freeze_between_its_redis_take_and_its_mysql_move_is_no_drift(make_sku, live_db):
    sku = make_sku(stock=10)
    InventoryLog.objects.create(sku_id=sku.sku_id, operation="FREEZE", quantity=4, op_id="freeze:t1",
                                status="pending", reason="halfway", actor="t")
    assert gate.freeze(sku_id=sku.sku_id, op_id="freeze:t1", quantity=4) is redis_keys.Freeze.TAKEN
    m = services.sku_measure(sku_id=sku.sku_id)
    assert (m.redis_available, m.freezes_taken, m.drift) == (6, 4, 0)


def test_one_run_at_a_time(make_sku, live_db):
    """The beat task, the admin button and the command cannot overlap."""
    sku = make_sku(stock=5)
    holder_in, holder_out = threading.Event(), threading.Event()

    def hold():
        try:
            with run_lease():
                holder_in.set()
                holder_out.wait(10)
        finally:
            connection.close()

    t = threading.Thread(target=hold)
    t.start()
    assert holder_in.wait(10)
    try:
        with pytest.raises(ReconciliationBusy):
            reconciliation_run(trigger="command", sku_ids=[sku.sku_id])
    finally:
        holder_out.set()
        t.join()
    assert reconciliation_run(trigger="command", observe_gap_s=0.01, sku_ids=[sku.sku_id]).error == ""


def _expire(lease: Lease) -> None:
    RunLease.objects.filter(name=lease.name).update(expires_at=timezone.now() - timedelta(seconds=1))


def test_an_expired_lease_is_taken_over_and_its_old_holder_stops(live_db):
    """A holder that stopped renewing (a dead process, a database it could not
    reach) loses the lease once it expires; it learns so at its next renewal."""
    name = f"test-{uuid.uuid4().hex[:8]}"
    first, second = Lease(name), Lease(name)
    assert first.take()
    assert not second.take()
    first.hold()  # renewing one's own lease is fine
    _expire(first)
    assert second.take()
    with pytest.raises(LeaseLost):
        first.hold()
    assert not first.take()
    second.give_up()
    assert first.take()


def test_taking_a_lease_twice_is_harmless(live_db):
    """A take sent again after its answer was lost finds it already held."""
    lease = Lease(f"test-{uuid.uuid4().hex[:8]}")
    assert lease.take() and lease.take()
    assert RunLease.objects.get(name=lease.name).holder == lease.holder


def test_a_run_that_lost_its_lease_repairs_nothing(make_sku, live_db):
    sku = make_sku(stock=10)
    redis().hincrby(redis_keys.sku_keys(sku.sku_id).stock, "available", 3)  # Redis above MySQL
    run = reconciliation_run(trigger="command", observe_gap_s=0.01, sku_ids=[])
    old = Lease(f"test-{uuid.uuid4().hex[:8]}")
    assert old.take()
    _expire(old)
    assert Lease(old.name).take()
    with pytest.raises(LeaseLost):
        services._repair(run, sku.sku_id, -3, "test", "obs-stale", old)
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 13


def test_no_server_local_lock_in_the_code():
    """GET_LOCK and its kin hold on one server: on a Galera cluster two nodes
    would each grant the same lock."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    apps = ("accounts", "backups", "core", "inventory", "orders", "reconciliation", "seckill_site")
    pattern = re.compile(r"\b(GET_LOCK|RELEASE_LOCK|IS_FREE_LOCK|IS_USED_LOCK|LOCK\s+TABLES)\b", re.IGNORECASE)
    found = [str(p.relative_to(root)) for app in apps for p in (root / app).rglob("*.py")
             if "tests" not in p.parts and pattern.search(p.read_text())]
    assert found == []


def test_a_repair_repeated_with_the_same_observation_applies_once(make_sku, live_db):
    sku = make_sku(stock=10)
    redis().hincrby(redis_keys.sku_keys(sku.sku_id).stock, "available", -2)
    run = reconciliation_run(trigger="command", observe_gap_s=0.01, sku_ids=[sku.sku_id])
    services._repair(run, sku.sku_id, 2, "test", "obs1")
    services._repair(run, sku.sku_id, 2, "test (reply lost, sent again)", "obs1")
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 10


def test_a_lost_sale_data_push_is_sent_again(make_sku, live_db):
    from inventory.services.skus import sku_update

    sku = make_sku(stock=5)
    from unittest import mock

    with mock.patch("inventory.redis.gate.meta_update", side_effect=RedisError("lost")):
        sku_update(sku_id=sku.sku_id, actor="t", status=Sku.Status.PAUSED)
    assert gate.reserve(sku_id=sku.sku_id, user_id=1, quantity=1, idempotency_key="k",
                        order_id=uuid.uuid4().hex).code is redis_keys.Reserve.OK  # Redis missed it
    run_for(sku.sku_id)
    assert gate.reserve(sku_id=sku.sku_id, user_id=2, quantity=1, idempotency_key="k",
                        order_id=uuid.uuid4().hex).code is redis_keys.Reserve.NOT_ACTIVE


# --- during a sale, with real processes ------------------------------------------------

@pytest.mark.worker
@pytest.mark.web
def test_reconciling_during_a_sale_makes_no_false_repair(web, worker, make_sku, make_buyers):
    from orders.tests.test_consumers import no_loss

    sku = make_sku(stock=150, per_user_limit=1)
    buyers = make_buyers(300)
    runs, stop = [], threading.Event()

    def reconciler():
        try:
            while not stop.is_set():
                try:
                    runs.append(reconciliation_run(trigger="command", observe_gap_s=0.05, sku_ids=[sku.sku_id]))
                except services.ReconciliationBusy:
                    time.sleep(0.05)
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


@pytest.mark.worker
@pytest.mark.web
def test_redis_flushed_during_a_sale_oversells_nothing(web, worker, make_sku, make_buyers):
    sku = make_sku(stock=80, per_user_limit=1)
    buyers = make_buyers(200)
    tokens = [tok for _, tok in buyers]

    results = sell_during(lambda: redis().flushdb(), web.port, tokens, sku.sku_id)
    accepted = accepted_ids(results)
    wait_until(lambda: Order.objects.filter(pk__in=accepted).count() == len(accepted), timeout=60,
               what="every accepted order in MySQL")
    settled(sku.sku_id, timeout=60)
    held = Order.objects.filter(pk__in=accepted, status="PENDING_PAYMENT").count()
    assert held == len(accepted) <= 80  # no 202 ends FAILED (the rebuild waited for the broker)
    run_for(sku.sku_id)  # rebuilds it if no click came after the loss
    wait_until(lambda: redis_snapshots.snapshot_exists(sku_id=sku.sku_id), timeout=30, what="rebuilt behind its fence")
    _, last, _ = run_for(sku.sku_id)
    assert last.drift == 0
    assert_balanced(sku.sku_id)


def test_cancelled_freezes_are_their_own_finding_not_a_resent_outbox(make_sku, live_db):
    from datetime import timedelta

    from django.utils import timezone

    sku = make_sku(stock=3)
    op_id = f"freeze:{uuid.uuid4().hex}"  # a freeze whose process died after writing its intent
    InventoryLog.objects.create(sku_id=sku.sku_id, operation=InventoryLog.Operation.FREEZE, quantity=1, op_id=op_id,
                                status=InventoryLog.Status.PENDING, reason="died", actor="t")
    InventoryLog.objects.filter(op_id=op_id).update(created_at=timezone.now() - timedelta(minutes=5))
    run, _row, _findings = run_for(sku.sku_id)
    cancelled = run.findings.get(kind=Finding.Kind.FREEZES_CANCELLED)
    assert cancelled.repaired and "freeze" in cancelled.detail
    assert not run.findings.filter(kind=Finding.Kind.OUTBOX_RESENT, detail__contains="freeze").exists()
    assert InventoryLog.objects.get(op_id=op_id).status == InventoryLog.Status.FAIL


def test_the_migration_reclassifies_freezes_recorded_as_resent_outbox(make_sku, live_db):
    import importlib

    from django.apps import apps

    migration = importlib.import_module("reconciliation.migrations.0004_model_names_and_freeze_findings")
    run = reconciliation_run(trigger="command", observe_gap_s=0.05, sku_ids=[make_sku(stock=1).sku_id])
    old = Finding.objects.create(run=run, kind=Finding.Kind.OUTBOX_RESENT, repaired=True,
                                 detail="2 unfinished freeze(s) cancelled")
    resent = Finding.objects.create(run=run, kind=Finding.Kind.OUTBOX_RESENT, repaired=True,
                                    detail="0 give(s) not applied in Redis, 1 outbox message(s) sent again")
    migration.freeze_findings_reclassify(apps, None)
    assert Finding.objects.get(pk=old.pk).kind == Finding.Kind.FREEZES_CANCELLED
    assert Finding.objects.get(pk=resent.pk).kind == Finding.Kind.OUTBOX_RESENT
