"""The decision about each reservation (inventory.services.decisions) against
the real MySQL: decided once, never rewritten, and of a confirm and an undo
racing for the same reservation exactly one decides."""
from __future__ import annotations

import importlib
import threading
import time
import uuid

import pytest
from django.apps import apps
from django.db import IntegrityError, connection
from django.utils import timezone

from inventory import selectors
from inventory.domain import Reservation
from inventory.models import InventoryLog, ReservationDecision, Sku
from inventory.services.decisions import DecisionRecord, reservation_decisions_record, reservation_undo_record
from orders.models import Order
from orders.services import confirm

pytestmark = pytest.mark.mariadb_both  # again on the Galera cluster in the cluster leg

Outcome = ReservationDecision.Outcome


def reservation(sku: Sku, user_id: int) -> Reservation:
    epoch = Sku.objects.get(pk=sku.sku_id).redis_epoch
    return Reservation(uuid.uuid4().hex, sku.sku_id, user_id, 1, uuid.uuid4().hex, int(time.time() * 1000), epoch)


def test_a_decision_is_never_rewritten_and_a_batch_is_written_all_or_none(make_sku):
    sku = make_sku(stock=1)
    first, second = uuid.uuid4().hex, uuid.uuid4().hex
    assert reservation_decisions_record(decisions=[DecisionRecord(first, sku.sku_id, Outcome.CONFIRMED)]) == {}
    before = ReservationDecision.objects.get(order_id=first)

    earlier = reservation_decisions_record(decisions=[DecisionRecord(second, sku.sku_id, Outcome.CONFIRMED),
                                                      DecisionRecord(first, sku.sku_id, Outcome.UNDONE)])
    assert earlier == {first: Outcome.CONFIRMED}
    after = ReservationDecision.objects.get(order_id=first)
    assert (after.outcome, after.decided_at, after.reason) == (before.outcome, before.decided_at, before.reason)
    assert not ReservationDecision.objects.filter(order_id=second).exists()  # none of the batch was written
    assert selectors.reservation_decisions(order_ids=[first, second]) == {first: Outcome.CONFIRMED}


def test_an_insert_that_fails_for_another_reason_is_no_lost_race(live_db):
    with pytest.raises(IntegrityError):  # no such SKU: raised, not read as "decided before"
        reservation_decisions_record(decisions=[DecisionRecord(uuid.uuid4().hex, "no-such-sku", Outcome.CONFIRMED)])


def test_a_release_decides_once_and_writes_the_audit_row_only_when_it_wins(make_sku, make_buyers):
    sku = make_sku(stock=1)
    (buyer, _), = make_buyers(1)
    r = reservation(sku, buyer.pk)
    assert reservation_undo_record(reservation=r, reason="undone", actor="user:1") is None
    assert reservation_undo_record(reservation=r, reason="again", actor="user:1") == Outcome.UNDONE
    assert list(InventoryLog.objects.filter(order_id=r.order_id).values_list("operation", "status", "reason")) == [
        (InventoryLog.Operation.DECR, InventoryLog.Status.FAIL, "undone")]


def _race(r: Reservation, undo_after: float) -> tuple[confirm.Decision, str | None, list[str]]:
    barrier = threading.Barrier(2)
    out: dict = {}

    def run(name, fn):
        try:
            barrier.wait()
            if name == "undo":
                time.sleep(undo_after)
            out[name] = fn()
        except Exception as exc:  # reported by the assertions below
            out[name] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=("confirm", lambda: confirm._decide_splitting(r.sku_id, [r], None))),
               threading.Thread(target=run, args=("undo", lambda: reservation_undo_record(
                   reservation=r, reason="released at the request", actor=f"user:{r.user_id}")))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    decision, dead = out["confirm"]
    return decision, out["undo"], dead


def test_of_a_concurrent_confirm_and_undo_exactly_one_decides(make_sku, make_buyers):
    sku = make_sku(stock=40, per_user_limit=40)
    (buyer, _), = make_buyers(1)
    winners = set()
    # From the undo first, through a true race, to the confirm surely first.
    for undo_after in [0, 0.002, 0.005, 0.01, 0.3] * 3:
        r = reservation(sku, buyer.pk)
        decision, undo, dead = _race(r, undo_after)
        assert not dead
        [outcome] = ReservationDecision.objects.filter(order_id=r.order_id).values_list("outcome", flat=True)
        if outcome == Outcome.CONFIRMED:  # the confirm won: the undo is told, and the order stands
            assert undo == Outcome.CONFIRMED and [x.order_id for x in decision.accepted] == [r.order_id]
            assert Order.objects.get(pk=r.order_id).status == Order.Status.PENDING_PAYMENT
        else:  # the undo won: the confirm read it and made no order
            assert outcome == Outcome.UNDONE and undo is None
            assert decision.undone_before == [r.order_id] and not decision.accepted
            assert not Order.objects.filter(pk=r.order_id).exists()
        assert InventoryLog.objects.filter(order_id=r.order_id, operation=InventoryLog.Operation.DECR).count() == 1
        winners.add(outcome)
    assert winners == {Outcome.CONFIRMED, Outcome.UNDONE}
    row = Sku.objects.get(pk=sku.sku_id)
    confirmed = Order.objects.filter(sku_id=sku.sku_id).count()
    assert (row.available_stock, row.locked_stock) == (40 - confirmed, confirmed)  # a unit per confirmed order


def test_a_decision_that_lands_between_the_confirms_read_and_write_makes_it_read_again(make_sku, make_buyers,
                                                                                        monkeypatch):
    """The window is narrow in life (an undo's insert waits for the SKU row the
    confirm locks, through its foreign key): the confirm's first read is made
    to miss an undo committed just before, as a read racing it would."""
    sku = make_sku(stock=2, per_user_limit=2)
    (buyer, _), = make_buyers(1)
    r, other = reservation(sku, buyer.pk), reservation(sku, buyer.pk)
    assert reservation_undo_record(reservation=r, reason="undone", actor="user:1") is None
    reads = []
    real = confirm.inventory_selectors.reservation_decisions

    def first_read_misses_it(*, order_ids):
        out = {} if not reads else real(order_ids=order_ids)
        reads.append(out)
        return out

    monkeypatch.setattr(confirm.inventory_selectors, "reservation_decisions", first_read_misses_it)
    decision, dead = confirm._decide_splitting(sku.sku_id, [r, other], None)
    assert not dead
    # read (missed it), lost the insert and was told what was decided, read again
    assert reads == [{}, {r.order_id: Outcome.UNDONE}, {r.order_id: Outcome.UNDONE}]
    assert decision.undone_before == [r.order_id] and [x.order_id for x in decision.accepted] == [other.order_id]
    assert not Order.objects.filter(pk=r.order_id).exists()  # the first attempt's writes were rolled back whole
    assert ReservationDecision.objects.get(order_id=r.order_id).outcome == Outcome.UNDONE
    row = Sku.objects.get(pk=sku.sku_id)
    assert (row.available_stock, row.locked_stock) == (1, 1)


# --- The back-fill of migration 0012 -----------------------------------------------------

backfill = importlib.import_module("inventory.migrations.0012_reservation_decision").decisions_backfill


def test_the_backfill_gives_each_old_row_kind_the_decision_the_confirm_read_then(make_sku, make_buyers):
    sku = make_sku(stock=10, per_user_limit=10)
    (buyer, _), = make_buyers(1)
    now = timezone.now()
    kinds = {"pending": ("PENDING_PAYMENT", ""), "paid": ("PAID", ""), "cancelled": ("CANCELLED", ""),
             "stock": ("FAILED", "insufficient_stock"), "stale": ("FAILED", "snapshot_lost"),
             "limit": ("FAILED", "limit_reached"), "closed": ("FAILED", "sale_not_active")}
    ids = {name: uuid.uuid4().hex for name in [*kinds, "undone", "replay_refused"]}
    # Each bucket as the mover left it (no move waits: the worker's mover leaves them alone).
    buckets = {"PENDING_PAYMENT": "none", "PAID": "sold", "CANCELLED": "available", "FAILED": "none"}
    for name, (status, why) in kinds.items():
        Order.objects.create(order_id=ids[name], user=buyer, sku=sku, quantity=1, status=status, failure_reason=why,
                             bucket=buckets[status], created_at=now, confirmed_at=now)
    reasons = {"undone": "released at the request: its publish failed",
               "replay_refused": "dead letter replay: sold out in Redis (1 needed)"}
    for name, oid in ids.items():  # every reservation MySQL heard of had its sale row
        InventoryLog.objects.create(sku=sku, operation="DECR", quantity=1, order_id=oid, op_id=oid, status="fail",
                                    reason=reasons.get(name, "order confirmed"), actor="user:1")
    InventoryLog.objects.create(sku=sku, operation="DECR", quantity=1, status="success")  # no order id: no decision

    backfill(apps, None)
    got = selectors.reservation_decisions(order_ids=list(ids.values()))
    assert {name: got.get(oid) for name, oid in ids.items()} == {
        "pending": "confirmed", "paid": "confirmed", "cancelled": "confirmed", "stock": "dropped",
        "stale": "dropped", "limit": "returned", "closed": "returned", "undone": "undone", "replay_refused": "undone"}
    # and each is what the confirm decides for a copy of the message now, as it did before the upgrade
    decision = confirm.decide(batch=[Reservation(oid, sku.sku_id, buyer.pk, 1, "k", 0) for oid in ids.values()],
                              decided=got, keys_taken=set(), held={}, sale=confirm.SaleState(10, 10, "active"))
    assert not decision.accepted and not decision.refused
    assert sorted(decision.settle_confirmed) == sorted(ids[n] for n in ("pending", "paid", "cancelled"))
    assert sorted(decision.settle_dropped) == sorted(ids[n] for n in ("stock", "stale"))
    assert sorted(decision.settle_returned) == sorted(ids[n] for n in ("limit", "closed", "undone",
                                                                         "replay_refused"))
    backfill(apps, None)  # again: nothing written twice
    assert ReservationDecision.objects.filter(order_id__in=ids.values()).count() == len(ids)


def test_the_migration_reverses_by_dropping_the_table_and_back_fills_when_applied_again(make_sku, make_buyers):
    from django.core.management import call_command

    sku = make_sku(stock=1)
    (buyer, _), = make_buyers(1)
    r = reservation(sku, buyer.pk)
    oid = r.order_id
    assert reservation_undo_record(reservation=r, reason="undone", actor="user:1") is None
    call_command("migrate", "inventory", "0011", verbosity=0)
    try:
        assert ReservationDecision._meta.db_table not in connection.introspection.table_names()
    finally:
        call_command("migrate", "inventory", verbosity=0)
    assert ReservationDecision.objects.get(order_id=oid).outcome == Outcome.UNDONE  # from its sale log row


def test_outcomes_of_before_the_glossary_read_in_its_words_and_the_migration_renames_them(make_sku):
    """Rows kept "refused", "failed" and "released" before issue 27; one an
    older process writes during the upgrade still reads as its outcome, and
    migration 0015 renames them all."""
    sku = make_sku(stock=1)
    old = {"refused": uuid.uuid4().hex, "failed": uuid.uuid4().hex, "released": uuid.uuid4().hex}
    for outcome, oid in old.items():
        ReservationDecision.objects.create(order_id=oid, sku=sku, outcome=outcome, decided_at=timezone.now())
    read = selectors.reservation_decisions(order_ids=list(old.values()))
    assert {read[oid] for oid in old.values()} == {Outcome.DROPPED, Outcome.RETURNED, Outcome.UNDONE}
    assert read[old["refused"]] == Outcome.DROPPED and read[old["released"]] == Outcome.UNDONE
    # what the confirm does with a copy of their messages follows the outcome
    decision = confirm.decide(batch=[Reservation(oid, sku.sku_id, 1, 1, "k", 0) for oid in old.values()],
                              decided=read, keys_taken=set(), held={}, sale=confirm.SaleState(10, 10, "active"))
    assert decision.settle_dropped == [old["refused"]]
    assert sorted(decision.settle_returned) == sorted([old["failed"], old["released"]])
    importlib.import_module("inventory.migrations.0015_outcome_words").rename(apps, None)
    stored = dict(ReservationDecision.objects.filter(order_id__in=old.values()).values_list("order_id", "outcome"))
    assert stored == {old["refused"]: "dropped", old["failed"]: "returned", old["released"]: "undone"}
