"""The contract's management commands (docs/contract.md): create_sku, warm_stock, create_buyers."""
from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from core.redis.connection import redis
from inventory.models import Sku
from inventory.redis import keys as redis_keys, live as redis_live, snapshots as redis_snapshots
from testsupport.factories import unique


def run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_create_sku_takes_a_date_time_without_offset_as_local_time(live_db):
    sku_id = unique("C")
    run("create_sku", sku_id, "--stock", "5", "--starts-at", "2030-01-01T20:00:00")
    assert Sku.objects.get(pk=sku_id).sale_starts_at == datetime(2030, 1, 1, 20, 0, tzinfo=UTC)
    with override_settings(TIME_ZONE="Asia/Shanghai"):
        other = unique("C")
        run("create_sku", other, "--stock", "5", "--starts-at", "2030-01-01T20:00:00",
            "--ends-at", "2030-01-02T20:00:00+00:00")
        row = Sku.objects.get(pk=other)
    assert row.sale_starts_at == datetime(2030, 1, 1, 12, 0, tzinfo=UTC)  # 20:00 in UTC+8
    assert row.sale_ends_at == datetime(2030, 1, 2, 20, 0, tzinfo=UTC)  # an offset is kept
    assert redis_live.live_stock(sku_id=sku_id).available == 5


@pytest.mark.parametrize(("args", "message"), [
    (["--stock", "-1"], "--stock"),
    (["--stock", "1", "--starts-at", "tomorrow"], "ISO 8601"),
    (["--stock", "1", "--starts-at", "2030-01-02T00:00:00", "--ends-at", "2030-01-01T00:00:00"], "after"),
    (["--stock", "1", "--per-user-limit", "0"], "--per-user-limit"),
    (["--stock", "1", "--price", "abc"], "--price"),
])
def test_create_sku_refuses_bad_input_and_changes_nothing(live_db, args, message):
    sku_id = unique("C")
    with pytest.raises(CommandError, match=message):
        run("create_sku", sku_id, *args)
    assert not Sku.objects.filter(pk=sku_id).exists()


def test_create_sku_refuses_an_existing_id(live_db):
    sku_id = unique("C")
    run("create_sku", sku_id, "--stock", "1")
    with pytest.raises(CommandError, match="exists"):
        run("create_sku", sku_id, "--stock", "9")
    assert Sku.objects.get(pk=sku_id).total_stock == 1


def test_warm_stock_loads_what_is_absent(live_db):
    sku_id = unique("C")
    Sku.objects.create(sku_id=sku_id, name=sku_id, total_stock=3, available_stock=3)  # Redis never had it
    redis_snapshots.sku_registry_add(sku_id=sku_id)  # as sku_create does
    out = run("warm_stock", sku_id)
    assert "loaded" in out and redis_live.live_stock(sku_id=sku_id).available == 3
    assert "already warm" in run("warm_stock", sku_id)
    # Redis lost it: no worker here, so the rebuild stays fenced (nothing loaded at once)
    redis().delete(redis_keys.sku_keys(sku_id).stock)
    out = run("warm_stock", sku_id, "--wait", "0.3")
    assert f"{sku_id}: fenced" in out and redis_live.live_stock(sku_id=sku_id) is None
    with pytest.raises(CommandError, match="unknown"):
        run("warm_stock", unique("nope"))


# --- Progress: on stderr, at most a line a second plus a last one; stdout keeps its contract ---

def run_both(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_create_buyers_prints_only_tokens_on_stdout_and_progress_on_stderr(live_db):
    out, err = run_both("create_buyers", "--count", "3", "--prefix", unique("p"))
    tokens = out.split()
    assert len(tokens) == 3 and all(len(t) == 40 and int(t, 16) >= 0 for t in tokens), out
    assert err.splitlines()[-1] == "3/3 buyers"


def test_warm_stock_reports_progress_on_stderr(live_db):
    sku_id = unique("C")
    run("create_sku", sku_id, "--stock", "2")
    out, err = run_both("warm_stock", sku_id)
    assert out == f"{sku_id}: already warm, available=2\n"
    assert err.splitlines() == ["1/1 SKUs"]


def test_reconcile_reports_progress_on_stderr_while_it_runs(live_db, monkeypatch):
    import re
    import time

    from reconciliation import services

    run("create_sku", unique("C"), "--stock", "1")
    run("create_sku", unique("C"), "--stock", "1")
    real = services.reconciliation_run

    def slow(**kw):  # a run long enough for the once-a-second line (a real one: many SKUs)
        time.sleep(1.3)
        return real(**kw)

    monkeypatch.setattr(services, "reconciliation_run", slow)
    # The run lock is a MariaDB named lock, server-wide: a run of another test
    # session on the same server may hold it for a moment.
    for _ in range(10):
        try:
            out, err = run_both("reconcile")
            break
        except CommandError as exc:
            if "another reconciliation is running" not in str(exc):
                raise
            time.sleep(0.5)
    else:
        pytest.fail("the reconciliation lock stayed taken")
    *during, last = err.splitlines()
    done = re.fullmatch(r"(\d+)/(\d+) SKUs in [\d.]+ s", last)
    assert done and done[1] == done[2] and int(done[2]) >= 2, err
    assert during and all(re.fullmatch(rf"\d+/{done[2]} SKUs", line) for line in during), err
    assert out.startswith("run ") and "SKUs" not in out  # stdout: the summary, as before


# --- seed_demo: the local demo, refused elsewhere ---

def test_seed_demo_under_local_settings_makes_the_demo_and_is_safe_twice(live_db, monkeypatch):
    from django.contrib.auth import get_user_model

    name = unique("root")
    monkeypatch.setenv("SECKILL_ADMIN_USER", name)
    monkeypatch.delenv("SECKILL_ADMIN_PASSWORD", raising=False)
    first = run("seed_demo")
    assert f"admin user: {name} / admin" in first and "demo buyer token: " in first
    second = run("seed_demo")
    assert f"admin user {name} exists" in second and "DEMO-PHONE exists" in second
    assert get_user_model().objects.get(username=name).is_superuser
    assert {"DEMO-PHONE", "DEMO-EARBUDS", "DEMO-WATCH"} <= set(Sku.objects.values_list("pk", flat=True))
    assert redis_live.live_stock(sku_id="DEMO-EARBUDS") is not None


def test_seed_demo_outside_local_settings_is_refused_and_creates_nothing(live_db, monkeypatch):
    from django.contrib.auth import get_user_model

    name = unique("root")
    monkeypatch.setenv("SECKILL_ADMIN_USER", name)
    monkeypatch.setenv("SECKILL_ADMIN_PASSWORD", "a-long-and-real-one-42")  # a good one: still refused
    skus, users = Sku.objects.count(), get_user_model().objects.count()
    with override_settings(SECKILL_DEMO_USERS=False), pytest.raises(CommandError, match="ensure_admin"):
        run("seed_demo")
    assert (Sku.objects.count(), get_user_model().objects.count()) == (skus, users)


def test_stock_distrust_fences_every_sku_until_the_queue_rebuilds_it_from_mysql(live_db):
    """After a restore MySQL's rows may differ from what Redis sells from: every
    snapshot is dropped and fenced, and the rebuild behind the fence reads the rows."""
    from testsupport.purchase import fence_reached

    sku_id = unique("C")
    Sku.objects.create(sku_id=sku_id, name=sku_id, total_stock=5, available_stock=5)
    redis_snapshots.sku_registry_add(sku_id=sku_id)
    run("warm_stock", sku_id)
    assert redis_live.live_stock(sku_id=sku_id).available == 5
    Sku.objects.filter(pk=sku_id).update(available_stock=3, sold_stock=2)  # the restored rows say otherwise
    with pytest.raises(CommandError):
        call_command("stock_distrust")  # --all is required: it pauses the whole sale
    assert "fence(s) listed" in run("stock_distrust", "--all")
    assert redis_live.live_stock(sku_id=sku_id) is None and redis_snapshots.fence_token(sku_id=sku_id)
    fence_reached(sku_id)  # the consumer reaching the fence, behind every message ahead of it
    assert redis_live.live_stock(sku_id=sku_id).available == 3
