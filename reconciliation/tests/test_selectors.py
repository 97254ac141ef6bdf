"""reconciliation.selectors: the live view's reads (the latest check, bounded and lock
free), and the report's history and metrics, read from the runs' rows."""
from __future__ import annotations

from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django.utils.formats import date_format

from core.redis.connection import redis
from inventory.redis import keys as redis_keys
from reconciliation import selectors
from reconciliation.models import SkuReconciliation
from reconciliation.services import reconciliation_run


def _sku_entry(body: dict, sku_id: str) -> dict:
    found = [s for s in body["skus"] if s["sku_id"] == sku_id]
    assert found, f"{sku_id} not on the live view"
    return found[0]


def test_drift_is_the_latest_check_and_reads_are_bounded_and_lock_free(live_db, make_sku):
    skus = [make_sku(stock=9, name="drift") for _ in range(3)]
    redis().hincrby(redis_keys.sku_keys(skus[0].sku_id).stock, "available", -4)
    reconciliation_run(trigger="command", observe_gap_s=0.05)
    latest = SkuReconciliation.objects.filter(sku_id=skus[0].sku_id).order_by("-pk").first()

    with CaptureQueriesContext(connection) as queries, override_settings(TIME_ZONE="Asia/Shanghai"):
        body = selectors.live_sale()
        shown = date_format(timezone.localtime(latest.run.finished_at), "DATETIME_FORMAT")
    sql = [q["sql"].upper() for q in queries.captured_queries]
    assert not any("FOR UPDATE" in q or "LOCK IN SHARE MODE" in q for q in sql), sql
    assert len(sql) <= 5, sql  # SKUs, orders grouped, latest checks, dead letters: whatever the SKUs
    row = _sku_entry(body, skus[0].sku_id)
    assert row["drift"]["value"] == latest.drift and row["drift"]["state"] == latest.state
    assert row["drift"]["run_id"] == latest.run_id
    assert row["drift"]["at"] == shown  # in the active time zone (8 h ahead of UTC here)
    assert len(body["skus"]) <= selectors.LIVE_SKU_LIMIT


def test_history_and_metrics_follow_each_run_of_a_sku(live_db, make_sku):
    sku = make_sku(stock=9)
    reconciliation_run(trigger="command", observe_gap_s=0.05, sku_ids=[sku.sku_id])
    redis().hincrby(redis_keys.sku_keys(sku.sku_id).stock, "available", -4)
    reconciliation_run(trigger="command", observe_gap_s=0.05, sku_ids=[sku.sku_id])
    rows = list(SkuReconciliation.objects.filter(sku_id=sku.sku_id).order_by("run__started_at", "run_id"))
    assert [r.drift for r in rows] == [0, -4]

    latest = selectors.run_latest()
    assert latest == rows[1].run
    assert sku.sku_id in {r.sku_id for r in selectors.run_rows(run=latest)}
    history = selectors.drift_history()[sku.sku_id]
    assert [(s.run_id, s.value) for s in history] == [(r.run_id, r.drift) for r in rows]
    repaired = (SkuReconciliation.State.REPAIRED, SkuReconciliation.State.REBUILT)
    assert [s.repaired for s in history] == [r.state in repaired for r in rows]
    buckets = selectors.bucket_history(sku_id=sku.sku_id)
    assert [b.run_id for b in buckets] == [r.run_id for r in rows]
    assert [b.available for b in buckets] == [9, 9]  # MySQL's own bucket, whatever Redis says
    assert f'seckill_sku_drift{{sku="{sku.sku_id}"}} -4' in selectors.metrics_lines()
