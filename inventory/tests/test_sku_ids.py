"""The SKU-id alphabet (inventory.domain): stated in the schema, enforced
wherever an id is made (the API, create_sku, the admin's add form, the import,
the model), reported where one made before it is stored (the migration,
`manage.py check`), and never able to stop the others in a loop over SKUs
(the fencing of a new Redis instance, warm_stock, reconciliation).

A SKU made before the alphabet is put in MySQL directly, as an old database
holds it; on one Redis its keys work, so the tests here show what the code
does with it. What a Redis Cluster does with it: test_sku_ids_cluster.py."""
from __future__ import annotations

import importlib
import io
import logging
import re
import uuid

import pytest
from django.apps import apps as django_apps
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone
from redis.exceptions import ConnectionError as RedisConnectionError, ResponseError

from core.errors import InvalidInput
from core.redis.connection import redis
from core.redis.instance import instance_check
from core.redis.shards import shard_of
from inventory import checks as inventory_checks
from inventory.domain import SKU_ID_PATTERN, SkuFence, sku_id_valid
from inventory.models import Sku
from inventory.redis import keys as redis_keys, snapshots as redis_snapshots
from inventory.services import skus
from inventory.services.snapshots import DistrustIncomplete
from inventory.tests.test_admin import staff
from inventory.tests.test_import_export import csv_file, good_rows, nothing_anywhere, preview
from testsupport.factories import unique

OUTSIDE = ["}ACC", "{ACC}", "A{B}", "@claims:x", "a b", " A", "A\n", "é", "A*", "A?", "A[1]", "A/B", "A:B",
           "", "x" * 65, "\u0661"]
INSIDE = ["A", "a.b_c-9", "DEMO-PHONE", "x" * 64, "-", "..", "0"]


def legacy_sku(sku_id: str, *, stock: int = 5, epoch: int = 1, status: str = Sku.Status.ACTIVE) -> Sku:
    """A SKU row as a database made before the alphabet holds it (no validation
    ran; Redis held it once: epoch 1)."""
    return Sku.objects.create(sku_id=sku_id, name="legacy", total_stock=stock, available_stock=stock,
                              sale_starts_at=timezone.now(), status=status, status_changed_at=timezone.now(),
                              redis_epoch=epoch)


@pytest.fixture
def legacy(live_db):
    """A live legacy SKU (starts with "}": an empty hash tag), removed after the test."""
    sku = legacy_sku("}" + unique("ACC"))
    yield sku
    Sku.objects.filter(pk=sku.pk).delete()
    keys = redis_keys.sku_keys(sku.sku_id)
    redis().delete(keys.stock, keys.fence, keys.lock)
    redis().zrem(redis_keys.FENCES_KEY, sku.sku_id)


def test_the_alphabet():
    assert [s for s in INSIDE if not sku_id_valid(s)] == []
    assert [s for s in OUTSIDE if sku_id_valid(s)] == []
    assert not sku_id_valid(None) and not sku_id_valid(7)
    # The schema's regex reads the same in ECMA 262 and Rust: plain ranges only.
    assert SKU_ID_PATTERN == "^[A-Za-z0-9._-]{1,64}$"


def _sku_id_schemas(doc: dict) -> list[tuple[str, dict]]:
    """Every sku_id a request carries in the schema: path and query
    parameters, and the properties of request bodies."""
    found = []
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            found.extend((f"{method} {path} {p['in']}", p["schema"])
                         for p in op.get("parameters", []) if p["name"] == "sku_id")
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
            if "sku_id" in body.get("properties", {}):
                found.append((f"{method} {path} body", body["properties"]["sku_id"]))
    return found


def test_the_schema_states_the_alphabet_for_every_sku_id_a_request_carries(live_db):
    doc = Client().get("/api/schema/").json()
    found = _sku_id_schemas(doc)
    assert {where.split()[0] + " " + where.split()[1] for where, _ in found} >= {
        "post /api/v1/orders", "get /api/v1/skus/{sku_id}"}
    for where, schema in found:
        assert (schema["pattern"], schema["minLength"], schema["maxLength"]) == (SKU_ID_PATTERN, 1, 64), where


def test_a_purchase_naming_an_id_outside_the_alphabet_is_400_invalid(live_db, api, make_sku, make_buyers,
                                                                      legacy):
    (_, token), = make_buyers(1)
    client = api(token)
    for bad in ["}ACC", "A\n", "@claims:x", "a b", legacy.sku_id]:
        r = client.post("/api/v1/orders", {"sku_id": bad, "quantity": 1}, format="json",
                        HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex)
        assert r.status_code == 400, (bad, r.content)
        assert r.json()["code"] == "invalid" and list(r.json()["errors"]) == ["sku_id"], r.json()
    # Nothing reached Redis for the legacy SKU, and a good id still buys.
    assert not redis_snapshots.snapshot_exists(sku_id=legacy.sku_id)
    good = make_sku(stock=2)
    r = client.post("/api/v1/orders", {"sku_id": good.sku_id, "quantity": 1}, format="json",
                    HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex)
    assert r.status_code == 202, r.content
    # A path naming such an id names no SKU (the path's answer: 404).
    assert client.get(f"/api/v1/skus/{legacy.sku_id}").status_code == 404


def test_create_sku_refuses_an_id_outside_the_alphabet(live_db):
    for bad in ["}ACC", "@claims:x", "a b", "A{B}"]:
        with pytest.raises(CommandError, match="SKU-id alphabet"):
            call_command("create_sku", bad, "--stock", "3", stdout=io.StringIO())
        nothing_anywhere([bad])
    # The service refuses it too, whoever calls it, before Redis hears of the id.
    with pytest.raises(InvalidInput):
        skus.sku_create(sku_id="}ACC", stock=3)
    nothing_anywhere(["}ACC"])


def test_the_admin_add_form_refuses_an_id_outside_the_alphabet_and_a_legacy_sku_stays_editable(live_db, legacy):
    _, client = staff("ops")
    base = {"name": "x", "price": "1.00", "per_user_limit": "1", "status": "active", "initial_stock": "5",
            "sale_starts_at_0": "2030-01-02", "sale_starts_at_1": "10:00:00", "sale_ends_at_0": "",
            "sale_ends_at_1": ""}
    for bad in ["}ACC", "A{B}", "@x"]:
        r = client.post("/admin/inventory/sku/add/", {**base, "sku_id": bad})
        assert r.status_code == 200, bad
        errors = r.context["adminform"].form.errors
        assert list(errors) == ["sku_id"] and "A-Z" in errors["sku_id"][0], errors
        nothing_anywhere([bad])
    # Ops can still end a SKU made before the alphabet (its id is read-only there).
    r = client.post(f"/admin/inventory/sku/{legacy.sku_id}/change/", {
        "name": "legacy", "price": "0.00", "per_user_limit": "1", "status": "ended",
        "sale_starts_at_0": "2020-01-01", "sale_starts_at_1": "00:00:00", "sale_ends_at_0": "", "sale_ends_at_1": ""})
    assert r.status_code == 302, r.context["adminform"].form.errors if r.context else r
    assert Sku.objects.get(pk=legacy.sku_id).status == Sku.Status.ENDED


def test_an_import_row_with_an_id_outside_the_alphabet_is_a_row_error_and_nothing_is_imported(live_db):
    prefix = unique("IMPALPHA")
    rows = good_rows(prefix, n=3)
    rows[1]["sku_id"] = "}" + prefix  # row 2
    _, ops = staff("ops")
    page = preview(ops, csv_file(rows))
    assert page.context.get("confirm_form") is None
    result = page.context["result"]
    assert {row.number: set(row.field_specific_errors) for row in result.invalid_rows} == {2: {"sku_id"}}
    assert "A-Z" in page.content.decode()
    nothing_anywhere([r["sku_id"] for r in rows])


def test_the_model_refuses_an_id_outside_the_alphabet(live_db):
    with pytest.raises(ValidationError) as refused:
        Sku(sku_id="}" + unique("M"), name="x").full_clean()
    assert [e.code for e in refused.value.error_dict["sku_id"]] == ["invalid_sku_id"]
    Sku(sku_id=unique("ACC"), name="x").full_clean()


def test_the_migration_reports_stored_ids_and_changes_nothing(live_db, legacy, capsys, caplog):
    ended = legacy_sku("@" + unique("OLD"), status=Sku.Status.ENDED)
    try:
        before = list(Sku.objects.filter(pk__in=[legacy.pk, ended.pk]).order_by("pk").values())
        migration = importlib.import_module("inventory.migrations.0013_sku_id_alphabet")
        with caplog.at_level(logging.WARNING, logger="inventory.migrations"):
            migration.report_ids_outside_the_alphabet(django_apps, None)
        out = capsys.readouterr().out
        assert repr(legacy.sku_id) in out and f"{ended.sku_id!r} (ended)" in out and "end it" in out
        assert repr(legacy.sku_id) in caplog.text
        assert list(Sku.objects.filter(pk__in=[legacy.pk, ended.pk]).order_by("pk").values()) == before
    finally:
        Sku.objects.filter(pk=ended.pk).delete()


def test_manage_py_check_lists_the_live_ids_outside_the_alphabet(live_db, legacy):
    ended = legacy_sku("}" + unique("END"), status=Sku.Status.ENDED)
    try:
        [warning] = [m for m in inventory_checks.sku_ids_in_alphabet() if m.id == "inventory.W001"]
        assert repr(legacy.sku_id) in warning.msg and repr(ended.sku_id) not in warning.msg
        err = io.StringIO()
        call_command("check", stdout=io.StringIO(), stderr=err)
        assert "inventory.W001" in err.getvalue() and legacy.sku_id in err.getvalue()
        Sku.objects.filter(pk=legacy.pk).update(status=Sku.Status.ENDED)
        assert not any(legacy.sku_id in m.msg for m in inventory_checks.sku_ids_in_alphabet())
    finally:
        Sku.objects.filter(pk=ended.pk).delete()


# --- One SKU cannot stop the others ------------------------------------------------------

def _new_instance_met(sku_id: str) -> None:
    """The Redis of this SKU as a process meets it after a move: no instance
    key recorded, so the next check runs the new-instance hooks (these tests
    run on one Redis; on a cluster: test_sku_ids_cluster.py)."""
    shard = shard_of(redis(), redis_keys.sku_keys(sku_id).stock)
    redis().delete(shard.key("instance"))
    instance_check(shard, recorded_only=True)


def _broken(sku_id: str) -> None:
    """Make every script on this SKU fail: its fence key holds a list
    (WRONGTYPE), as a key of another program or version would."""
    keys = redis_keys.sku_keys(sku_id)
    redis().delete(keys.fence)
    redis().rpush(keys.fence, "not-a-token")


def test_the_new_instance_check_skips_an_id_outside_the_alphabet_and_fences_the_rest(live_db, make_sku, legacy,
                                                                                     caplog):
    good = make_sku(stock=4)
    assert redis_snapshots.snapshot_exists(sku_id=good.sku_id)
    with caplog.at_level(logging.ERROR, logger="inventory.services.snapshots"):
        _new_instance_met(legacy.sku_id)  # does not raise
    assert redis_snapshots.fence_token(sku_id=good.sku_id) is not None  # dropped and fenced for a rebuild
    assert not redis_snapshots.snapshot_exists(sku_id=good.sku_id)
    assert redis_snapshots.fence_token(sku_id=legacy.sku_id) is None  # never sent to Redis
    assert SkuFence(legacy.sku_id) not in redis_snapshots.fences_listed()
    assert re.search(r"outside the SKU-id alphabet not fenced.*" + re.escape(repr(legacy.sku_id)), caplog.text)
    # The instance is recorded as checked: a SKU made now warms at once.
    fresh = skus.sku_create(sku_id=unique("T"), stock=2)
    assert redis_snapshots.snapshot_exists(sku_id=fresh.sku_id)


def test_a_sku_whose_fence_fails_is_counted_the_rest_fenced_and_the_check_runs_again(live_db, make_sku,
                                                                                     monkeypatch, caplog):
    # "A-" sorts before "T-" (the factory's ids): the failing SKU comes first.
    failing = skus.sku_create(sku_id=unique("A"), stock=3)
    good = make_sku(stock=3)
    for sku_id in (failing.sku_id, good.sku_id):  # lost: the check fences them from MySQL's list
        redis().delete(redis_keys.sku_keys(sku_id).stock)
    # The scripts on an id of the alphabet do not fail for one SKU alone on a
    # healthy server: its fence call is made to fail as Redis refuses a command.
    real = redis_snapshots.fence_raise

    def fence_raise(*, sku_id: str, delay_ms: int):
        if sku_id == failing.sku_id:
            raise ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")
        return real(sku_id=sku_id, delay_ms=delay_ms)

    monkeypatch.setattr(redis_snapshots, "fence_raise", fence_raise)
    with caplog.at_level(logging.ERROR, logger="inventory.services.snapshots"), \
            pytest.raises(DistrustIncomplete, match=re.escape(failing.sku_id)):
        _new_instance_met(failing.sku_id)
    assert f"SKU {failing.sku_id} not fenced" in caplog.text
    assert redis_snapshots.fence_token(sku_id=good.sku_id) is not None  # the rest were fenced
    shard = shard_of(redis(), redis_keys.sku_keys(good.sku_id).stock)
    assert redis().get(shard.key("instance")) is None  # not recorded: the next contact checks again
    monkeypatch.setattr(redis_snapshots, "fence_raise", real)  # the shard answers again
    instance_check(shard, recorded_only=True)
    assert redis_snapshots.fence_token(sku_id=failing.sku_id) is not None
    assert redis().get(shard.key("instance")) is not None


def test_a_shard_that_stops_answering_fails_the_check_at_once(live_db, make_sku, monkeypatch):
    lost = make_sku(stock=2)
    redis().delete(redis_keys.sku_keys(lost.sku_id).stock)
    calls = []

    def fence_raise(*, sku_id: str, delay_ms: int):
        calls.append(sku_id)
        raise RedisConnectionError("the shard did not answer")

    monkeypatch.setattr(redis_snapshots, "fence_raise", fence_raise)
    with pytest.raises(RedisConnectionError):
        _new_instance_met(lost.sku_id)
    assert len(calls) == 1  # not one failure per SKU of a shard that is away
    shard = shard_of(redis(), redis_keys.sku_keys(lost.sku_id).stock)
    assert redis().get(shard.key("instance")) is None  # checked again on the next contact
    monkeypatch.undo()
    instance_check(shard, recorded_only=True)
    assert redis_snapshots.fence_token(sku_id=lost.sku_id) is not None


def test_warm_stock_goes_on_past_a_sku_that_fails(live_db, make_sku):
    failing = skus.sku_create(sku_id=unique("A"), stock=3)
    good = make_sku(stock=3)
    for sku_id in (failing.sku_id, good.sku_id):
        redis().delete(redis_keys.sku_keys(sku_id).stock)
    Sku.objects.filter(pk__in=[failing.pk, good.pk]).update(redis_epoch=0)  # never warmed: loaded at once
    _broken(failing.sku_id)
    out = io.StringIO()
    with pytest.raises(CommandError, match=f"not warmed: {re.escape(failing.sku_id)}"):
        call_command("warm_stock", failing.sku_id, good.sku_id, "--wait", "0", stdout=out, stderr=io.StringIO())
    assert f"{failing.sku_id}: not warmed" in out.getvalue()
    assert redis_snapshots.snapshot_exists(sku_id=good.sku_id)
    redis().delete(redis_keys.sku_keys(failing.sku_id).fence)


def test_reconciliation_goes_on_past_a_sku_that_fails(live_db, make_sku):
    from reconciliation.models import ReconciliationRun, SkuReconciliation
    from reconciliation.services import reconciliation_run

    failing, good = skus.sku_create(sku_id=unique("A"), stock=3), make_sku(stock=3)
    redis().delete(redis_keys.sku_keys(failing.sku_id).stock)
    redis().set(redis_keys.sku_keys(failing.sku_id).stock, "not-a-hash")  # every read of it is WRONGTYPE
    try:
        run = reconciliation_run(trigger=ReconciliationRun.Trigger.COMMAND, sku_ids=[failing.sku_id, good.sku_id],
                                 observe_gap_s=0)
    finally:
        redis().delete(redis_keys.sku_keys(failing.sku_id).stock)
    assert run.skus_checked == 1 and failing.sku_id in run.error and "not reconciled" in run.error
    assert SkuReconciliation.objects.filter(run=run, sku_id=good.sku_id).exists()
