"""The report page and the metrics, as people and scrapers see them."""
from __future__ import annotations

import pytest
from django.test import Client, override_settings

from core.redis.connection import redis
from inventory.redis import keys as redis_keys
from reconciliation.services import reconciliation_run
from testsupport.browser import browser_login as login
from testsupport.factories import make_staff, unique


@pytest.mark.browser
@pytest.mark.web
def test_staff_sees_latest_run_and_drift_row_anonymous_is_refused(browser, web, make_sku, live_db):
    from selenium.webdriver.common.by import By

    sku = make_sku(stock=9, name="drifting thing")
    redis().hincrby(redis_keys.sku_keys(sku.sku_id).stock, "available", -4)
    run = reconciliation_run(trigger="command", observe_gap_s=0.05)
    base = f"http://127.0.0.1:{web.port}"

    browser.get(f"{base}/reconciliation/")
    assert "/admin/login/" in browser.current_url  # anonymous: sent to log in, no report
    assert browser.find_elements(By.NAME, "password") and not browser.find_elements(By.ID, "sku-rows")

    user, pw = make_staff("support")
    login(browser, base, user, pw)
    browser.get(f"{base}/reconciliation/")
    assert f"#{run.pk}" in browser.find_element(By.ID, "latest-run").text
    row = browser.find_element(By.ID, f"row-{sku.sku_id}")
    cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
    assert cells[1:3] == ["5", "9"] and cells[6] == "-4"
    assert "drift" in row.find_element(By.CSS_SELECTOR, "td.drift").get_attribute("class")
    assert browser.find_elements(By.CSS_SELECTOR, f"#series-{sku.sku_id} svg polyline")
    browser.find_element(By.LINK_TEXT, f"#{run.pk}").click()
    assert "Redis below MySQL" in browser.page_source or "Drift that cannot be repaired" in browser.page_source


def test_metrics_need_a_token_or_staff(make_sku, live_db):
    make_sku(stock=3)
    reconciliation_run(trigger="command", observe_gap_s=0.01)
    assert Client().get("/reconciliation/metrics").status_code == 403
    with override_settings(SECKILL_METRICS_TOKEN="s3cret"):
        assert Client().get("/reconciliation/metrics", HTTP_AUTHORIZATION="Bearer nope").status_code == 403
        body = Client().get("/reconciliation/metrics", HTTP_AUTHORIZATION="Bearer s3cret").content.decode()
    assert "seckill_reconciliation_runs_total" in body and "seckill_sku_drift{sku=" in body
    assert "seckill_dead_letters" in body


def test_reconcile_command_prints_a_summary(make_sku, live_db):
    from io import StringIO

    from django.core.management import call_command

    sku = make_sku(stock=4)
    out = StringIO()
    call_command("reconcile", stdout=out)
    assert "SKU(s) checked" in out.getvalue() and f"{sku.sku_id}: redis=4" in out.getvalue()


def test_admin_button_runs_a_reconciliation(live_db, make_sku):
    from django.contrib.auth import get_user_model

    from reconciliation.models import ReconciliationRun

    make_sku(stock=2)
    admin = get_user_model().objects.create_superuser(username=unique("boss"), password="pw")
    c = Client()
    c.force_login(admin)
    before = ReconciliationRun.objects.count()
    r = c.post("/admin/reconciliation/reconciliationrun/run-now/")
    assert r.status_code == 302 and ReconciliationRun.objects.count() == before + 1
    assert c.get(r.url).status_code == 200


def test_report_charts_the_chosen_sku_in_the_active_time_zone(make_sku, live_db):
    from zoneinfo import ZoneInfo

    from django.utils import timezone

    sku = make_sku(stock=6)
    from reconciliation.tests.test_report_browser import when_free

    run = when_free(lambda: reconciliation_run(trigger="command", observe_gap_s=0.01, sku_ids=[sku.sku_id]))
    c = Client()
    c.force_login(get_user(make_staff("support")[0]))
    with timezone.override(ZoneInfo("Asia/Shanghai")):
        r = c.get("/reconciliation/", {"sku": sku.sku_id})
    assert r.status_code == 200 and r.context["bucket_sku"] == sku.sku_id
    html = r.content.decode()
    local = timezone.localtime(run.started_at, ZoneInfo("Asia/Shanghai"))
    assert f'<time datetime="{local.isoformat()}">{local:%Y-%m-%d %H:%M:%S}</time>' in html
    assert f'id="buckets-{sku.sku_id}"' in html and "run start time (Asia/Shanghai)" in html
    assert 'class="breadcrumbs"' in html and 'id="user-tools"' in html
    # an unknown SKU falls back to a charted one instead of failing
    r = c.get("/reconciliation/", {"sku": "<no such sku>"})
    assert r.status_code == 200 and r.context["bucket_sku"] in r.context["history_skus"]
    r = c.get(f"/reconciliation/runs/{run.pk}/")
    assert r.status_code == 200 and f"Run #{run.pk}" in r.content.decode()


def get_user(username: str):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(username=username)


def _logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_report_and_metrics_need_the_reconciliation_view_permission(make_sku, live_db):
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    make_sku(stock=3)
    run = reconciliation_run(trigger="command", observe_gap_s=0.01)
    pages = ["/reconciliation/", f"/reconciliation/runs/{run.pk}/"]
    User = get_user_model()
    bare = User.objects.create_user(username=unique("bare"), password="pw", is_staff=True)  # staff, no group
    for url in pages:
        anonymous = Client().get(url)
        assert anonymous.status_code == 302 and "/admin/login/" in anonymous.url, url
        assert _logged_in(bare).get(url).status_code == 403, url
    assert _logged_in(bare).get("/reconciliation/metrics").status_code == 403

    bare.user_permissions.add(Permission.objects.get(content_type__app_label="reconciliation",
                                                     codename="view_reconciliationrun"))
    granted = User.objects.get(pk=bare.pk)  # a fresh object: permissions are cached per instance
    for url in pages:
        assert _logged_in(granted).get(url).status_code == 200, url
    metrics = _logged_in(granted).get("/reconciliation/metrics")
    assert metrics.status_code == 200 and b"seckill_reconciliation_runs_total" in metrics.content
    for group in ("support", "ops"):  # both admin groups read the report
        member = User.objects.get(username=make_staff(group)[0])
        assert all(_logged_in(member).get(url).status_code == 200 for url in pages), group
        assert _logged_in(member).get("/reconciliation/metrics").status_code == 200, group
    with override_settings(SECKILL_METRICS_TOKEN="s3cret"):  # the scraper's token needs no login
        assert Client().get("/reconciliation/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200


def test_the_live_view_needs_the_stock_view_permission(make_sku, live_db):
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    make_sku(stock=3)
    User = get_user_model()
    bare = User.objects.create_user(username=unique("bare"), password="pw", is_staff=True)
    for url in ("/admin/dashboard/", "/admin/dashboard/data.json"):
        assert _logged_in(bare).get(url).status_code == 403, url
    bare.user_permissions.add(Permission.objects.get(content_type__app_label="inventory", codename="view_sku"))
    granted = User.objects.get(pk=bare.pk)
    for url in ("/admin/dashboard/", "/admin/dashboard/data.json"):
        assert _logged_in(granted).get(url).status_code == 200, url
