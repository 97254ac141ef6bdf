"""Pay, cancel, expire: one winner per order, every unit back in both stores."""
from __future__ import annotations

import random
import threading
import uuid
from datetime import timedelta
from unittest import mock

import pytest
from django.db import connection
from django.utils import timezone

from inventory.models import InventoryLog, OutboxMessage
from inventory.redis import gate, live as redis_live
from orders.models import Order
from orders.services import life as services
from testsupport import wait_until
from testsupport.http import place as buy
from testsupport.stores import assert_balanced, confirmed, gives_applied, moves_applied, settled

pytestmark = [pytest.mark.worker, pytest.mark.mariadb_both]


def test_pay_moves_locked_to_sold_and_is_harmless_to_repeat(api, make_sku, make_buyers, worker):
    sku = make_sku(stock=3)
    (_, token), = make_buyers(1)
    client = api(token)
    oid = buy(client, sku.sku_id)
    processing = client.post(f"/api/v1/orders/{oid}/pay")  # may still be PROCESSING: refused, or paid
    assert processing.status_code in (200, 409)
    if processing.status_code == 409:
        assert processing.json()["code"] == "not_payable"
        confirmed(oid)
    r = client.post(f"/api/v1/orders/{oid}/pay")
    assert r.status_code == 200 and r.json()["status"] == "PAID"
    again = client.post(f"/api/v1/orders/{oid}/pay")
    assert again.status_code == 200 and again.json()["status"] == "PAID"
    settled(sku.sku_id)
    moves_applied(sku.sku_id)  # the mover applies the decided move to the SKU row
    row = assert_balanced(sku.sku_id)
    assert (row.available_stock, row.locked_stock, row.sold_stock) == (2, 0, 1)
    assert InventoryLog.objects.get(order_id=oid, operation="DECR").status == "success"
    assert client.post(f"/api/v1/orders/{oid}/cancel").json()["code"] == "not_cancellable"


def test_cancel_gives_back_in_both_stores_once(api, make_sku, make_buyers, worker):
    sku = make_sku(stock=2, per_user_limit=1)
    (_, token), = make_buyers(1)
    client = api(token)
    oid = buy(client, sku.sku_id)
    confirmed(oid)
    r = client.post(f"/api/v1/orders/{oid}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "CANCELLED"
    assert client.post(f"/api/v1/orders/{oid}/cancel").status_code == 200
    pay = client.post(f"/api/v1/orders/{oid}/pay")
    assert pay.status_code == 409 and pay.json()["code"] == "not_payable"
    gives_applied(sku.sku_id)
    row = assert_balanced(sku.sku_id)
    assert (row.available_stock, row.locked_stock) == (2, 0)
    # the buyer's per-user count came back too: the limit of 1 lets them buy again
    assert buy(client, sku.sku_id)
    logs = dict(InventoryLog.objects.filter(order_id=oid).values_list("operation", "status"))
    assert logs == {"DECR": "fail", "INCR": "success"}


def test_expired_stock_is_bought_again_by_a_new_buyer(api, make_sku, make_buyers, worker):
    sku = make_sku(stock=1)
    (_, first), (_, second) = make_buyers(2)
    oid = buy(api(first), sku.sku_id)
    confirmed(oid)
    assert api(second).post("/api/v1/orders", {"sku_id": sku.sku_id, "quantity": 1}, format="json",
                            HTTP_IDEMPOTENCY_KEY="x").json()["code"] == "sold_out"
    Order.objects.filter(pk=oid).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert api(first).post(f"/api/v1/orders/{oid}/pay").json()["code"] == "not_payable"
    while services.orders_expire(sku_ids=[sku.sku_id]):
        pass
    assert Order.objects.get(pk=oid).status == Order.Status.EXPIRED
    gives_applied(sku.sku_id)
    wait_until(lambda: redis_live.live_stock(sku_id=sku.sku_id).available == 1, what="unit back in Redis")
    # the process memo of "sold out" is short; give it time to lapse
    wait_until(lambda: api(second).post("/api/v1/orders", {"sku_id": sku.sku_id, "quantity": 1}, format="json",
                                        HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex).status_code == 202,
               what="second buyer gets the unit", timeout=5)
    settled(sku.sku_id)
    row = assert_balanced(sku.sku_id)
    assert (row.available_stock, row.locked_stock) == (0, 1)


def test_other_users_order_is_404_everywhere(api, make_sku, make_buyers, worker):
    sku = make_sku(stock=2)
    (_, owner), (_, other) = make_buyers(2)
    oid = buy(api(owner), sku.sku_id)
    confirmed(oid)
    for method, url in [("get", f"/api/v1/orders/{oid}"), ("post", f"/api/v1/orders/{oid}/pay"),
                        ("post", f"/api/v1/orders/{oid}/cancel")]:
        r = getattr(api(other), method)(url)
        assert r.status_code == 404 and r.json()["code"] == "not_found", (url, r.content)
    assert Order.objects.get(pk=oid).status == Order.Status.PENDING_PAYMENT
    assert api(owner).post("/api/v1/orders/not-an-id/pay").status_code == 404


def test_relay_dying_after_commit_loses_nothing(make_sku, worker, live_db):
    """The give's transaction committed, its relay died before sending: the
    outbox row stays unsent until the sweep relays it, and then it lands once."""
    from inventory.services.gives import outbox_relay
    from inventory.services.stock import stock_restock

    sku = make_sku(stock=1)
    with mock.patch("inventory.messages.celery_sends.publish_gives", side_effect=ConnectionError("relay died")):
        op_id = stock_restock(sku_id=sku.sku_id, quantity=2, reason="more", actor="t")
    assert OutboxMessage.objects.get(op_id=op_id).sent_at is None
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 1  # Redis not given yet
    assert outbox_relay(older_than_s=0) >= 1
    gives_applied(sku.sku_id)
    row = assert_balanced(sku.sku_id)
    assert row.available_stock == 3


def test_give_delivered_twice_restores_once(api, make_sku, make_buyers, worker):
    """Two copies of one give, each in a message of its own under the old
    one-give task (as a release before batched gives sent it, left queued
    across an upgrade): the consumer of old messages applies it once."""
    from celery import current_app

    from inventory import signing
    from inventory.messages.names import GIVE_TASK

    sku = make_sku(stock=2)
    (_, token), = make_buyers(1)
    client = api(token)
    oid = buy(client, sku.sku_id)
    confirmed(oid)
    client.post(f"/api/v1/orders/{oid}/cancel")
    gives_applied(sku.sku_id)
    payload = OutboxMessage.objects.get(op_id=f"{oid}:release").payload
    ids = [current_app.send_task(GIVE_TASK, args=[payload, signing.sign(payload)]).id for _ in range(2)]
    # both redeliveries ran and found the give applied already
    wait_until(lambda: all(f"stock_give_task[{i}] succeeded" in worker.log_text() for i in ids),
               what="both redeliveries handled", timeout=15)
    for i in ids:
        line = next(ln for ln in worker.log_text().splitlines() if f"stock_give_task[{i}] succeeded" in ln)
        assert line.rstrip().endswith(": 'already'"), line
    settled(sku.sku_id)
    row = assert_balanced(sku.sku_id)
    assert row.available_stock == 2


def test_pay_cancel_and_expiry_race_with_one_winner_each(make_sku, make_buyers, worker, live_db):
    """Hundreds of orders; payers, cancellers and expiry sweepers all at once."""
    from inventory.messages.publisher import publish_confirms
    from testsupport.purchase import reserve_direct

    n = 200
    sku = make_sku(stock=n, per_user_limit=1)
    buyers = make_buyers(n)
    reservations = [reserve_direct(sku.sku_id, user.pk, key="k") for user, _ in buyers]
    publish_confirms(reservations)
    wait_until(lambda: Order.objects.filter(sku_id=sku.sku_id, status="PENDING_PAYMENT").count() == n,
               what="all confirmed", timeout=30)
    # half of them expire while the payers and cancellers are at work
    ids = [r.order_id for r in reservations]
    Order.objects.filter(pk__in=ids[: n // 2]).update(expires_at=timezone.now() + timedelta(milliseconds=300))
    owner = {r.order_id: r.user_id for r in reservations}
    results: dict[str, list[str]] = {oid: [] for oid in ids}
    lock = threading.Lock()

    def actor(kind: str, seed: int):
        rnd = random.Random(seed)
        order = ids[:]
        rnd.shuffle(order)
        try:
            for oid in order:
                try:
                    if kind == "pay":
                        services.order_pay(user_id=owner[oid], order_id=oid)
                    else:
                        services.order_cancel(user_id=owner[oid], order_id=oid)
                    outcome = kind
                except Exception as exc:  # a clear refusal
                    outcome = getattr(exc, "code", repr(exc))
                with lock:
                    results[oid].append(outcome)
        finally:
            connection.close()

    def sweeper():
        try:
            for _ in range(20):
                services.orders_expire(limit=50, sku_ids=[sku.sku_id])
        finally:
            connection.close()

    threads = [threading.Thread(target=actor, args=(k, i)) for i, k in enumerate(["pay", "cancel", "pay", "cancel"])]
    threads += [threading.Thread(target=sweeper) for _ in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    services.orders_expire(sku_ids=[sku.sku_id])
    odd = {o for v in results.values() for o in v} - {"pay", "cancel", "not_payable", "not_cancellable"}
    assert not odd, odd
    final = dict(Order.objects.filter(pk__in=ids).values_list("order_id", "status"))
    assert set(final.values()) <= {"PAID", "CANCELLED", "EXPIRED"}
    gives_applied(sku.sku_id)
    settled(sku.sku_id)
    row = assert_balanced(sku.sku_id)
    paid = sum(1 for s in final.values() if s == "PAID")
    assert row.sold_stock == paid and row.locked_stock == 0 and row.available_stock == n - paid
    for oid, status in final.items():
        logs = dict(InventoryLog.objects.filter(order_id=oid).values_list("operation", "status"))
        assert logs == ({"DECR": "success"} if status == "PAID" else {"DECR": "fail", "INCR": "success"}), (oid, logs)
    from inventory.services.gives import outbox_relay

    assert outbox_relay(older_than_s=0) == 0


def test_a_payment_id_already_used_by_another_order_is_409(api, make_sku, make_buyers, worker):
    sku = make_sku(stock=3)
    (_, a), (_, b) = make_buyers(2)
    oa, ob = buy(api(a), sku.sku_id), buy(api(b), sku.sku_id)
    confirmed(oa)
    confirmed(ob)
    assert api(a).post(f"/api/v1/orders/{oa}/pay", {"payment_id": "psp-1"}, format="json").status_code == 200
    reused = api(b).post(f"/api/v1/orders/{ob}/pay", {"payment_id": "psp-1"}, format="json")
    assert reused.status_code == 409 and reused.json()["code"] == "payment_id_reused"
    assert Order.objects.get(pk=ob).status == "PENDING_PAYMENT"
    # compared exactly: another case is another payment id
    assert api(b).post(f"/api/v1/orders/{ob}/pay", {"payment_id": "PSP-1"}, format="json").status_code == 200
    # the provider's retried callback for the first order is harmless
    assert api(a).post(f"/api/v1/orders/{oa}/pay", {"payment_id": "psp-1"}, format="json").status_code == 200


def test_a_second_payment_id_on_a_paid_order_is_409_already_paid(api, make_sku, make_buyers, worker):
    sku = make_sku(stock=3, per_user_limit=2)
    (_, token), = make_buyers(1)
    client = api(token)
    with_id, without_id = buy(client, sku.sku_id), buy(client, sku.sku_id)
    confirmed(with_id)
    confirmed(without_id)
    pay = lambda oid, body=None: client.post(f"/api/v1/orders/{oid}/pay", body, format="json")  # noqa: E731
    assert pay(with_id, {"payment_id": "cap-1"}).status_code == 200
    second = pay(with_id, {"payment_id": "cap-2"})
    assert second.status_code == 409 and second.json()["code"] == "already_paid", second.content
    # the same id again, or none, is the harmless retry it always was
    assert pay(with_id, {"payment_id": "cap-1"}).status_code == 200
    assert pay(with_id).status_code == 200
    # paid with no id, then an id arrives: a second payment too
    assert pay(without_id).status_code == 200
    assert pay(without_id, {"payment_id": "cap-3"}).json()["code"] == "already_paid"
    stored = dict(Order.objects.filter(pk__in=[with_id, without_id]).values_list("order_id", "payment_id"))
    assert stored == {with_id: "cap-1", without_id: None}
    moves_applied(sku.sku_id)
    settled(sku.sku_id)
    assert assert_balanced(sku.sku_id).sold_stock == 2


def test_pay_or_cancel_of_a_final_order_locks_no_sku_row(api, make_sku, make_buyers, worker):
    """With the SKU row held by someone else, a refusal or a repeat still answers."""
    from testsupport.faults import RowHold

    sku = make_sku(stock=3, per_user_limit=2)
    (_, token), = make_buyers(1)
    client = api(token)
    paid, cancelled = buy(client, sku.sku_id), buy(client, sku.sku_id)
    confirmed(paid)
    confirmed(cancelled)
    assert client.post(f"/api/v1/orders/{paid}/pay").status_code == 200
    assert client.post(f"/api/v1/orders/{cancelled}/cancel").status_code == 200
    answers: dict[str, int] = {}

    def calls():
        try:
            answers["pay again"] = client.post(f"/api/v1/orders/{paid}/pay").status_code
            answers["cancel paid"] = client.post(f"/api/v1/orders/{paid}/cancel").status_code
            answers["pay cancelled"] = client.post(f"/api/v1/orders/{cancelled}/pay").status_code
            answers["cancel again"] = client.post(f"/api/v1/orders/{cancelled}/cancel").status_code
        finally:
            connection.close()

    with RowHold(sku.sku_id):
        t = threading.Thread(target=calls)
        t.start()
        t.join(8)  # well below the lock-wait timeout (10 s) these calls would hit if they waited
        assert not t.is_alive(), "a call waited for the SKU row"
    assert answers == {"pay again": 200, "cancel paid": 409, "pay cancelled": 409, "cancel again": 200}


def test_a_payment_waits_for_no_sku_row_and_its_move_lands_when_the_row_is_free(api, make_sku, make_buyers, worker):
    from testsupport.faults import RowHold

    sku = make_sku(stock=4, per_user_limit=4)
    (_, token), = make_buyers(1)
    client = api(token)
    paid, cancelled = buy(client, sku.sku_id), buy(client, sku.sku_id)
    confirmed(paid)
    confirmed(cancelled)
    answers: dict[str, dict] = {}

    def calls():
        try:
            answers["pay"] = client.post(f"/api/v1/orders/{paid}/pay").json()
            answers["cancel"] = client.post(f"/api/v1/orders/{cancelled}/cancel").json()
        finally:
            connection.close()

    with RowHold(sku.sku_id):  # the hot row is busy (a confirm, a mover, ops)
        t = threading.Thread(target=calls)
        t.start()
        t.join(8)
        assert not t.is_alive(), "a payment waited for the SKU row"
        assert (answers["pay"]["status"], answers["cancel"]["status"]) == ("PAID", "CANCELLED")
    gives_applied(sku.sku_id)
    row = assert_balanced(sku.sku_id)
    assert (row.available_stock, row.locked_stock, row.sold_stock) == (3, 0, 1)
    assert dict(InventoryLog.objects.filter(order_id=paid).values_list("operation", "status")) == {"DECR": "success"}


def test_the_mover_applies_any_number_of_moves_with_the_same_statements(make_sku, make_buyers, live_db, no_worker):
    """One SKU row update and the same statements per batch, whatever its
    size: payments do not queue behind the row one by one."""
    from django.test.utils import CaptureQueriesContext

    from orders.services.confirm import confirm_in_mysql
    from testsupport.purchase import reserve_direct

    def apply_batch(n: int) -> list[str]:
        sku = make_sku(stock=n, per_user_limit=n)
        (user, _), = make_buyers(1)
        reservations = [reserve_direct(sku.sku_id, user.pk) for _ in range(n)]
        confirm_in_mysql(sku_id=sku.sku_id, batch=reservations)
        for i, r in enumerate(reservations):
            (services.order_pay if i % 2 else services.order_cancel)(user_id=user.pk, order_id=r.order_id)
        with mock.patch("inventory.messages.celery_sends.publish_gives"), CaptureQueriesContext(connection) as q:
            done = services.order_moves_apply(sku_id=sku.sku_id)
        assert (done.sold, done.given_back) == (n // 2, n // 2)
        for r in reservations:
            gate.undo(sku_id=sku.sku_id, order_id=r.order_id)
        return [x["sql"].split(" WHERE ")[0][:60] for x in q.captured_queries]

    small, large = apply_batch(4), apply_batch(40)
    assert len(small) == len(large), (small, large)
    assert sum(1 for x in large if x.startswith("UPDATE `inventory_sku`")) == 1
