"""The compiled-SQL helpers (core.db): an insert names its columns, checked
against the model, so a value can never land in the wrong column."""
from __future__ import annotations

import uuid

import pytest
from django.core.exceptions import FieldDoesNotExist
from django.utils import timezone

from core import db
from inventory.models import InventoryLog, Sku

FIELDS = ("sku", "operation", "quantity", "order_id", "op_id", "status", "reason", "actor", "created_at",
          "updated_at")


def test_a_name_the_model_lacks_fails_when_the_shape_is_built():
    with pytest.raises(FieldDoesNotExist):
        db.Insert(InventoryLog, FIELDS[:-1] + ("updated",))


def test_a_column_named_twice_or_a_required_one_left_out_fails_when_built():
    with pytest.raises(ValueError, match="named twice"):
        db.Insert(InventoryLog, FIELDS + ("sku_id",))
    with pytest.raises(ValueError, match="quantity has no default"):
        db.Insert(InventoryLog, tuple(f for f in FIELDS if f != "quantity"))


def row(sku_id: str, op_id: str, **kw) -> dict:
    now = timezone.now()
    return {"sku": sku_id, "operation": "RESTOCK", "quantity": 3, "order_id": None, "op_id": op_id,
            "status": "success", "reason": "r", "actor": "a", "created_at": now, "updated_at": now, **kw}


def test_rows_are_written_by_name_whatever_their_order_and_a_wrong_name_sends_nothing(live_db):
    sku = Sku.objects.create(sku_id=f"DB-{uuid.uuid4().hex[:8]}", name="x")
    insert = db.Insert(InventoryLog, FIELDS)
    a, b = uuid.uuid4().hex, uuid.uuid4().hex
    reordered = dict(reversed(list(row(sku.sku_id, b, quantity=7, reason="second").items())))
    assert insert.run([row(sku.sku_id, a), reordered]) == 2
    got = dict(InventoryLog.objects.filter(sku=sku).values_list("op_id", "quantity"))
    assert got == {a: 3, b: 7}
    assert InventoryLog.objects.get(op_id=b).reason == "second"

    bad = row(sku.sku_id, uuid.uuid4().hex)
    bad["qty"] = bad.pop("quantity")
    with pytest.raises(KeyError):
        insert.run([row(sku.sku_id, uuid.uuid4().hex), bad])
    with pytest.raises(ValueError, match="beyond or short"):
        insert.run([{**row(sku.sku_id, uuid.uuid4().hex), "extra": 1}])
    assert InventoryLog.objects.filter(sku=sku).count() == 2  # nothing of either was sent


def test_a_field_left_out_that_has_a_default_is_written_with_it(live_db):
    sku = Sku.objects.create(sku_id=f"DB-{uuid.uuid4().hex[:8]}", name="x")
    op = uuid.uuid4().hex
    db.Insert(InventoryLog, [f for f in FIELDS if f not in ("reason", "actor", "order_id")]).run(
        [{k: v for k, v in row(sku.sku_id, op).items() if k not in ("reason", "actor", "order_id")}])
    got = InventoryLog.objects.get(op_id=op)
    assert (got.reason, got.actor, got.order_id) == ("", "", None)
