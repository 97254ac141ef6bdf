"""A COMMIT whose answer is lost: the write took effect and the writer never
heard. When the database node dies mid-COMMIT or the cluster's front moves to
another node, every writer meets it; each must be harmless to run again, or
read back what happened (docs/failures.md, "A lost commit").

Every test here loses the answer on a real MariaDB connection (the statement
or the COMMIT ran on the server) and checks that the caller got the outcome it
asked for exactly once. With SECKILL_DB_RETRY_SECONDS=0 the request paths
answer 503 instead and these tests fail."""
from __future__ import annotations

import time
import uuid

import pytest
from django.db import OperationalError, connection

from inventory.domain import Reservation
from inventory.models import InventoryLog, OutboxMessage, ReservationDecision, Sku
from inventory.services import stock as stock_services
from orders.models import Order
from orders.services import life
from orders.services.confirm import confirm_in_mysql
from testsupport.faults import AnswersLost
from testsupport.processes import workers_stopped
from testsupport.stores import assert_balanced, gives_applied, moves_applied

pytestmark = [pytest.mark.worker, pytest.mark.mariadb_both]


def _order_table() -> str:
    return connection.ops.quote_name(Order._meta.db_table)


def test_a_pay_whose_answer_is_lost_answers_paid_once(pending):
    sku, ((oid, client),) = pending(1)
    with AnswersLost(statement=f"UPDATE {_order_table()}") as fault:
        r = client.post(f"/api/v1/orders/{oid}/pay", {"payment_id": "pay-lost-1"}, format="json")
    assert fault.lost == 1
    assert r.status_code == 200 and r.json()["status"] == "PAID", r.content
    order = Order.objects.get(pk=oid)
    assert (order.status, order.payment_id) == (Order.Status.PAID, "pay-lost-1")
    moves_applied(sku.sku_id)
    row = assert_balanced(sku.sku_id)
    assert (row.sold_stock, row.locked_stock) == (1, 0)


def test_a_cancel_whose_answer_is_lost_answers_cancelled_and_gives_back_once(pending):
    sku, ((oid, client),) = pending(1, stock=3)
    with AnswersLost(statement=f"UPDATE {_order_table()}") as fault:
        r = client.post(f"/api/v1/orders/{oid}/cancel")
    assert fault.lost == 1
    assert r.status_code == 200 and r.json()["status"] == "CANCELLED", r.content
    gives_applied(sku.sku_id)
    row = assert_balanced(sku.sku_id)
    assert (row.available_stock, row.locked_stock, row.sold_stock) == (3, 0, 0)
    assert InventoryLog.objects.filter(order_id=oid, operation="INCR").count() == 1


def test_a_bucket_move_whose_commit_answer_is_lost_moves_once(pending):
    sku, orders = pending(2, stock=4)
    with workers_stopped():  # this test is the mover
        for oid, client in orders:
            assert client.post(f"/api/v1/orders/{oid}/pay").status_code == 200
        with AnswersLost(commits=True) as fault:
            applied = life.order_moves_apply(sku_id=sku.sku_id)
        assert fault.lost == 1
        # the retry found the orders moved already: nothing left for it
        assert applied.sold in (0, 2)
        row = Sku.objects.get(pk=sku.sku_id)
        assert (row.available_stock, row.locked_stock, row.sold_stock) == (2, 0, 2)
        assert set(Order.objects.filter(sku_id=sku.sku_id).values_list("bucket", flat=True)) == {Order.Bucket.SOLD}


def test_a_restock_whose_commit_answer_is_lost_adds_once(make_sku, worker):
    sku = make_sku(stock=5)
    with AnswersLost(commits=True) as fault:
        op_id = stock_services.stock_restock(sku_id=sku.sku_id, quantity=3, reason="lost answer", actor="test")
    assert fault.lost == 1
    assert OutboxMessage.objects.filter(op_id=op_id).count() == 1
    gives_applied(sku.sku_id)
    row = assert_balanced(sku.sku_id)
    assert (row.total_stock, row.available_stock) == (8, 8)


def test_a_freeze_whose_commit_answer_is_lost_freezes_once_and_says_so(make_sku, worker):
    sku = make_sku(stock=5)
    with AnswersLost(commits=True) as fault:
        op_id = stock_services.stock_freeze(sku_id=sku.sku_id, quantity=2, reason="lost answer", actor="test")
    assert fault.lost == 1
    assert InventoryLog.objects.get(op_id=op_id).status == InventoryLog.Status.SUCCESS
    row = assert_balanced(sku.sku_id)
    assert (row.available_stock, row.frozen_stock) == (3, 2)


def test_a_confirm_batch_whose_commit_answer_is_lost_makes_each_order_once(make_sku, make_buyers, no_worker):
    sku = make_sku(stock=5, per_user_limit=1)
    now_ms = int(time.time() * 1000)
    batch = [Reservation(order_id=uuid.uuid4().hex, sku_id=sku.sku_id, user_id=user.pk, quantity=1,
                         idempotency_key=uuid.uuid4().hex, reserved_ms=now_ms + i,
                         epoch=Sku.objects.get(pk=sku.sku_id).redis_epoch)
             for i, (user, _) in enumerate(make_buyers(3))]
    from core.retry import until_done

    with AnswersLost(commits=True) as fault:
        decision = until_done(lambda: confirm_in_mysql(sku_id=sku.sku_id, batch=batch), attempts=5)
    assert fault.lost == 1
    # the retry read the decisions the lost commit had recorded, and followed them
    assert sorted(decision.confirmed_before) == sorted(r.order_id for r in batch)
    assert Order.objects.filter(sku_id=sku.sku_id, status=Order.Status.PENDING_PAYMENT).count() == 3
    assert ReservationDecision.objects.filter(order_id__in=[r.order_id for r in batch],
                                              outcome=ReservationDecision.Outcome.CONFIRMED).count() == 3
    row = Sku.objects.get(pk=sku.sku_id)
    assert (row.available_stock, row.locked_stock) == (2, 3)


def test_a_node_not_ready_is_waited_out_on_a_fresh_connection(pending):
    """1047: the node left the cluster's primary component; the next
    connection reaches a synced node through the front."""
    sku, ((oid, client),) = pending(1)
    with AnswersLost(statement=f"UPDATE {_order_table()}", code=1047, times=2) as fault:
        r = client.post(f"/api/v1/orders/{oid}/pay")
    assert fault.lost == 2
    assert r.status_code == 200 and r.json()["status"] == "PAID", r.content


def test_no_retry_past_the_budget(pending, settings):
    """A database that stays away answers 503 once the budget is spent, and the
    order is what the server holds (here: paid, since the statement ran)."""
    settings.SECKILL_DB_RETRY_SECONDS = 0
    sku, ((oid, client),) = pending(1)
    with AnswersLost(statement=f"UPDATE {_order_table()}"):
        r = client.post(f"/api/v1/orders/{oid}/pay")
    assert r.status_code == 503 and r.json()["code"] == "unavailable", r.content
    # asking again reads back what happened: harmless
    again = client.post(f"/api/v1/orders/{oid}/pay")
    assert again.status_code == 200 and again.json()["status"] == "PAID"


def test_inside_a_transaction_nothing_is_retried(make_sku):
    """A transaction is gone with its connection: only its owner can start it
    over, so the retry loop lets the error through at once."""
    from django.db import transaction

    from core.retry import with_mysql_retry

    calls = []

    def fail():
        calls.append(1)
        raise OperationalError(2013, "lost")

    with pytest.raises(OperationalError), transaction.atomic():
        with_mysql_retry(fail)
    assert calls == [1]
