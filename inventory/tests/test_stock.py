"""inventory.services.stock's ops moves: a freeze is a take (Redis first), unfreeze,
write-off and restock are gives; both stores stay balanced, even mid-sale, and a
freeze whose process died is resolved by the stale-intent sweep; a repair of
Redis moves it once per id."""
from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from unittest import mock

import pytest
from django.db import OperationalError

from core.errors import StockActionRefused
from inventory.models import InventoryLog, Sku
from inventory.redis import gate, live as redis_live
from inventory.services import stock as services
from testsupport import wait_until
from testsupport.http import run_parallel
from testsupport.stores import assert_balanced, gives_applied, settled

pytestmark = pytest.mark.mariadb_both  # again on the Galera cluster in the cluster leg


def test_freeze_larger_than_redis_is_refused_and_changes_nothing(make_sku, live_db):
    sku = make_sku(stock=5)
    gate.reserve(sku_id=sku.sku_id, user_id=1, quantity=1, idempotency_key="k", order_id=uuid.uuid4().hex)
    with pytest.raises(StockActionRefused):
        services.stock_freeze(sku_id=sku.sku_id, quantity=5, reason="too many", actor="t")
    row = Sku.objects.get(pk=sku.sku_id)
    assert (row.available_stock, row.frozen_stock) == (5, 0)
    live = redis_live.live_stock(sku_id=sku.sku_id)
    assert (live.available, live.frozen) == (4, 0)
    # the attempt is audited, as refused
    assert list(InventoryLog.objects.filter(sku_id=sku.sku_id, operation="FREEZE").values_list("status", flat=True)) \
        == ["fail"]


@pytest.mark.worker
def test_freeze_unfreeze_write_off_restock_keep_both_stores_balanced(make_sku, worker, live_db):
    sku = make_sku(stock=20)
    services.stock_freeze(sku_id=sku.sku_id, quantity=8, reason="hold back", actor="ops")
    services.stock_unfreeze(sku_id=sku.sku_id, quantity=3, reason="release some", actor="ops")
    services.stock_write_off(sku_id=sku.sku_id, quantity=2, reason="damaged", actor="ops")
    services.stock_restock(sku_id=sku.sku_id, quantity=10, reason="new batch", actor="ops")
    with pytest.raises(StockActionRefused):
        services.stock_unfreeze(sku_id=sku.sku_id, quantity=4, reason="more than frozen", actor="ops")
    gives_applied(sku.sku_id)
    row = assert_balanced(sku.sku_id)
    assert (row.total_stock, row.available_stock, row.frozen_stock) == (28, 25, 3)
    live = redis_live.live_stock(sku_id=sku.sku_id)
    assert (live.total, live.frozen) == (28, 3)
    ops = list(InventoryLog.objects.filter(sku_id=sku.sku_id).exclude(operation="DECR")
               .order_by("id").values_list("operation", "quantity", "status", "actor"))
    assert ops == [("RESTOCK", 20, "success", ""), ("FREEZE", 8, "success", "ops"),
                   ("UNFREEZE", 3, "success", "ops"), ("WRITE_OFF", 2, "success", "ops"),
                   ("RESTOCK", 10, "success", "ops")]


@pytest.mark.worker
@pytest.mark.web
def test_freeze_during_a_running_sale_never_goes_below_zero(web, worker, make_sku, make_buyers):
    sku = make_sku(stock=60, per_user_limit=1)
    buyers = make_buyers(120)
    jobs = [(token, sku.sku_id, 1, uuid.uuid4().hex) for _, token in buyers]
    frozen, refused = [], []

    def freezer():
        from django.db import connection

        try:
            for _ in range(10):
                try:
                    services.stock_freeze(sku_id=sku.sku_id, quantity=3, reason="mid-sale", actor="ops")
                    frozen.append(3)
                except StockActionRefused:
                    refused.append(3)
        finally:
            connection.close()

    t = threading.Thread(target=freezer)
    t.start()
    results = run_parallel(web.port, jobs, threads=24)
    t.join()
    sold = [s for s, _ in results].count(202)
    settled(sku.sku_id)
    row = assert_balanced(sku.sku_id)
    assert sold + sum(frozen) <= 60
    assert row.frozen_stock == sum(frozen) and row.locked_stock == sold
    assert row.available_stock == 60 - sold - sum(frozen) >= 0
    assert redis_live.live_stock(sku_id=sku.sku_id).available >= 0


@pytest.mark.worker
def test_restock_is_buyable_at_once(api, make_sku, make_buyers, worker):
    sku = make_sku(stock=1)
    (_, a), (_, b) = make_buyers(2)
    assert api(a).post("/api/v1/orders", {"sku_id": sku.sku_id, "quantity": 1}, format="json",
                       HTTP_IDEMPOTENCY_KEY="1").status_code == 202
    assert api(b).post("/api/v1/orders", {"sku_id": sku.sku_id, "quantity": 1}, format="json",
                       HTTP_IDEMPOTENCY_KEY="2").json()["code"] == "sold_out"
    services.stock_restock(sku_id=sku.sku_id, quantity=5, reason="more", actor="ops")
    wait_until(lambda: api(b).post("/api/v1/orders", {"sku_id": sku.sku_id, "quantity": 1}, format="json",
                                   HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex).status_code == 202,
               what="restocked unit bought", timeout=5)


def test_a_freeze_whose_mysql_move_never_happened_is_cancelled_and_given_back(make_sku, live_db):
    """MySQL went away after Redis took the units: the intent stays pending, a
    young one is left to finish, an old one is cancelled and its take given back."""
    sku = make_sku(stock=10)
    with mock.patch("inventory.services.stock.with_mysql_retry", side_effect=OperationalError(2006, "gone away")), \
            pytest.raises(OperationalError):
        services.stock_freeze(sku_id=sku.sku_id, quantity=4, reason="hold", actor="ops")
    intent = InventoryLog.objects.get(sku_id=sku.sku_id, operation="FREEZE")
    assert intent.status == "pending"
    live = redis_live.live_stock(sku_id=sku.sku_id)
    assert (live.available, live.frozen) == (6, 4)  # Redis took them; MySQL did not move

    services.stock_freezes_resolve()  # within the deadline: may still complete
    intent.refresh_from_db()
    assert intent.status == "pending"

    assert services.stock_freezes_resolve(older_than=timedelta(0)) >= 1
    intent.refresh_from_db()
    assert (intent.status, intent.reason) == ("fail", "cancelled: the freeze never completed")
    row = assert_balanced(sku.sku_id)
    assert (row.available_stock, row.frozen_stock) == (10, 0)
    assert redis_live.live_stock(sku_id=sku.sku_id).frozen == 0


def test_a_repair_moves_redis_once_per_id_and_logs_each_call(make_sku, live_db):
    """Reconciliation decides a repair; inventory makes it: Redis's available
    moves once per repair id (a call repeated after a lost reply changes
    nothing more), MySQL's buckets do not move, and the log keeps the call."""
    sku = make_sku(stock=10)
    assert services.stock_repair(sku_id=sku.sku_id, repair_id="repair:t:1", delta=-2, why="test", actor="t") == 8
    assert services.stock_repair(sku_id=sku.sku_id, repair_id="repair:t:1", delta=-2, why="again", actor="t") is None
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 8
    assert Sku.objects.get(pk=sku.sku_id).available_stock == 10
    rows = InventoryLog.objects.filter(sku_id=sku.sku_id, operation=InventoryLog.Operation.REPAIR).order_by("pk")
    assert [(r.op_id, r.status, r.actor, r.reason) for r in rows] == [
        ("repair:t:1", "success", "t", "redis available -2 -> 8; test"),
        ("repair:t:1", "success", "t", "redis available -2 -> None; again")]
