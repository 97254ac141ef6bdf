"""The retention sweep: after many small sales, ended and past their lifetimes,
MySQL keeps only the audit trail and Redis only what live SKUs need; the SKUs
stay readable and can be sold again."""
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from inventory.messages import names
from inventory.models import DeadLetter, InventoryLog, OutboxMessage, Sku
from inventory.redis import keys as redis_keys, liveness, snapshots as redis_snapshots
from inventory.services import skus
from orders.models import Order
from orders.services import life
from reconciliation import alerts, services
from reconciliation.models import Alert, Finding, ReconciliationRun, SkuReconciliation
from reconciliation.tasks import RETENTION_SWEEP_TASK, retention_sweep_task
from testsupport.factories import make_staff
from testsupport.http import place
from testsupport.stores import assert_balanced, confirmed, gives_applied, settled

pytestmark = pytest.mark.worker

SALES = 6
BUYERS = 3
PAST = timedelta(days=31)  # beyond SECKILL_RETENTION_DAYS (30) and the Redis grace (1 day)


def sell_out(api, make_sku, make_buyers) -> tuple[list[str], list[tuple[object, str]]]:
    """Small sales through the real services and a real worker: in each, one
    order paid, one cancelled, one left to expire."""
    buyers = make_buyers(BUYERS)
    sku_ids = []
    for _ in range(SALES):
        sku = make_sku(stock=BUYERS)
        sku_ids.append(sku.sku_id)
        oids = [place(api(token), sku.sku_id) for _user, token in buyers]
        for oid in oids:
            confirmed(oid)
        (u0, t0), (u1, t1), _ = buyers
        life.order_pay(user_id=u0.pk, order_id=oids[0])
        life.order_cancel(user_id=u1.pk, order_id=oids[1])
        Order.objects.filter(pk=oids[2]).update(expires_at=timezone.now() - timedelta(seconds=1))
        while life.orders_expire(sku_ids=[sku.sku_id]):
            pass
        settled(sku.sku_id)
        gives_applied(sku.sku_id)
    return sku_ids, buyers


def age_everything(sku_ids: list[str]) -> None:
    """Move the rows' own timestamps back past their lifetimes (no clock is faked)."""
    then = timezone.now() - PAST
    Sku.objects.filter(pk__in=sku_ids).update(status_changed_at=then)
    OutboxMessage.objects.filter(sku_id__in=sku_ids).update(created_at=then)
    ReconciliationRun.objects.update(started_at=then, finished_at=then)
    DeadLetter.objects.update(created_at=then)
    DeadLetter.objects.exclude(status=DeadLetter.Status.OPEN).update(resolved_at=then)
    Alert.objects.update(created_at=then)
    from axes.models import AccessAttempt, AccessFailureLog, AccessLog

    for model in (AccessAttempt, AccessLog, AccessFailureLog):
        model.objects.update(attempt_time=then)


def test_after_many_sales_only_the_audit_trail_is_left(api, make_sku, make_buyers, worker, live_db):
    from axes.models import AccessAttempt, AccessFailureLog, AccessLog
    from django_celery_beat.models import PeriodicTask

    from inventory.services.dead_letters import dead_letter_discard, dead_letter_record

    sku_ids, buyers = sell_out(api, make_sku, make_buyers)
    run = services.reconciliation_run(trigger=ReconciliationRun.Trigger.COMMAND, sku_ids=sku_ids)
    Finding.objects.create(run=run, kind=Finding.Kind.OUTBOX_RESENT, repaired=True, detail="old news")
    letter = dead_letter_record(task_name=names.GIVE_TASK, payload={"x": 1}, reason="refused: test")
    alerts.alerts_send()  # the letter's alert row
    dead_letter_discard(dead_letter_id=letter.pk, actor="ops", reason="junk")
    Client().post("/admin/login/", {"username": f"nobody-{uuid.uuid4().hex[:6]}", "password": "wrong"},
                  REMOTE_ADDR="10.9.8.7")  # axes counts a failure
    name, password = make_staff("ops")
    Client().post("/admin/login/", {"username": name, "password": password}, REMOTE_ADDR="10.9.8.6")  # logged
    for sku_id in sku_ids:
        skus.sku_update(sku_id=sku_id, actor="t", status=Sku.Status.ENDED)
    assert all(redis_keys.sku_key_names(sku_id=s) for s in sku_ids)
    assert OutboxMessage.objects.filter(sku_id__in=sku_ids).count() == 2 * SALES  # a cancel, an expiry each
    assert SkuReconciliation.objects.filter(sku_id__in=sku_ids).count() == SALES
    assert Alert.objects.filter(dead_letter=letter).exists()
    assert AccessAttempt.objects.exists() and AccessLog.objects.exists()
    audit = (Order.objects.filter(sku_id__in=sku_ids).count(),
             InventoryLog.objects.filter(sku_id__in=sku_ids).count())
    age_everything(sku_ids)

    out = retention_sweep_task()

    assert out["skus_retired"] >= SALES, out
    counts = {
        "outbox": OutboxMessage.objects.filter(sku_id__in=sku_ids).count(),
        "runs": ReconciliationRun.objects.count(),
        "sku_rows": SkuReconciliation.objects.filter(sku_id__in=sku_ids).count(),
        "findings": Finding.objects.count(),
        "alerts": Alert.objects.exclude(dead_letter__status=DeadLetter.Status.OPEN).count(),  # open ones stay
        "dead_letters_resolved": DeadLetter.objects.exclude(status=DeadLetter.Status.OPEN).count(),
        "login_attempts": AccessAttempt.objects.count(),
        "login_logs": AccessLog.objects.count(),
        "login_failures": AccessFailureLog.objects.count(),
    }
    assert counts == dict.fromkeys(counts, 0), counts
    assert (Order.objects.filter(sku_id__in=sku_ids).count(),
            InventoryLog.objects.filter(sku_id__in=sku_ids).count()) == audit  # the audit trail stays
    assert {s: redis_keys.sku_key_names(sku_id=s) for s in sku_ids} == {s: [] for s in sku_ids}
    assert all(redis_snapshots.sku_registry_check(sku_id=s) in (True, None) for s in sku_ids)
    assert RETENTION_SWEEP_TASK in liveness.sweeps_last_run()
    assert PeriodicTask.objects.filter(task=RETENTION_SWEEP_TASK, enabled=True).exists()

    _, (user, token), _ = buyers  # the buyer whose order was cancelled holds no unit
    for sku_id in sku_ids:
        r = api(token).get(f"/api/v1/skus/{sku_id}")
        assert r.status_code == 200, r.content
        row = Sku.objects.get(pk=sku_id)
        assert (r.json()["sale_state"], r.json()["available"]) == ("ended", row.available_stock) == ("ended", 2)
    assert {s: redis_keys.sku_key_names(sku_id=s) for s in sku_ids} == {s: [] for s in sku_ids}
    assert retention_sweep_task()["skus_retired"] == 0  # a second pass finds nothing to do

    # Ops open one sale again: it is loaded at once (no fence), exactly, and sells.
    again = sku_ids[0]
    skus.sku_update(sku_id=again, actor="t", status=Sku.Status.ACTIVE)
    oid = place(api(token), again)
    confirmed(oid)
    settled(again)
    row = assert_balanced(again)
    assert (row.available_stock, row.locked_stock, row.sold_stock) == (1, 1, 1)
    assert row.redis_epoch == 2 and row.redis_dropped_at is None
