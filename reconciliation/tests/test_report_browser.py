"""The report page as staff see it in headless Chromium: inside the admin's frame,
with labelled charts, in the reader's language and the server's time zone."""
from __future__ import annotations

import io
import re
import time
from zoneinfo import ZoneInfo

import pytest

from core.redis.connection import redis
from inventory.redis import keys as redis_keys
from reconciliation.models import ReconciliationRun, SkuReconciliation
from reconciliation.services import reconciliation_run
from testsupport import ROOT
from testsupport.browser import browser_login as login, chromium, chromium_quit
from testsupport.factories import make_staff
from testsupport.processes import start_web

pytestmark = [pytest.mark.browser, pytest.mark.web]

SCREENSHOT = ROOT / "docs" / "screenshots" / "report.png"
SHANGHAI = ZoneInfo("Asia/Shanghai")


def drifting_history(make_sku) -> tuple[str, list[ReconciliationRun]]:
    """A SKU whose Redis lost 4 units, then three runs: an alert (seen once),
    the repair (seen again), and a run of `manage.py reconcile` finding it in agreement.
    The first two (of this SKU only) are moved 10 and 5 minutes back, as the
    schedule would have spread them, so the time axis has minutes to show."""
    from datetime import timedelta

    from django.core.management import call_command
    from django.db.models import F

    # The report charts the latest runs of the whole database: start from none,
    # so what earlier tests of the session ran cannot push this history out.
    ReconciliationRun.objects.all().delete()
    sku = make_sku(stock=9, name="charted thing")
    redis().hincrby(redis_keys.sku_keys(sku.sku_id).stock, "available", -4)
    runs = [when_free(lambda: reconciliation_run(trigger="command", observe_gap_s=0.05, sku_ids=[sku.sku_id]))
            for _ in range(2)]
    when_free(lambda: call_command("reconcile", stdout=io.StringIO()))
    runs.append(ReconciliationRun.objects.filter(finished_at__isnull=False).first())
    states = [SkuReconciliation.objects.get(run=r, sku=sku).state for r in runs]
    assert states == ["alert", "repaired", "ok"], states
    for run, minutes in zip(runs[:2], (10, 5)):
        back = timedelta(minutes=minutes)
        ReconciliationRun.objects.filter(pk=run.pk).update(started_at=F("started_at") - back,
                                                           finished_at=F("finished_at") - back)
        run.refresh_from_db()
    return sku.sku_id, runs


def when_free(run):
    """Call `run` once the reconciliation lease is free (another run of this
    test database's may hold it for a moment)."""
    from django.core.management import CommandError

    from reconciliation.lease import ReconciliationBusy

    for _ in range(200):
        try:
            return run()
        except (ReconciliationBusy, CommandError) as exc:
            if "another reconciliation" not in str(exc):
                raise
            time.sleep(0.1)
    raise AssertionError("the reconciliation lock stayed taken for 20 s")




def test_report_is_an_admin_page_with_breadcrumbs_and_labelled_time_charts(browser, web, make_sku, live_db):
    from selenium.webdriver.common.by import By

    sku_id, runs = drifting_history(make_sku)
    base = f"http://127.0.0.1:{web.port}"
    user, pw = make_staff("support")
    login(browser, base, user, pw)
    browser.get(f"{base}/reconciliation/?sku={sku_id}")

    # the admin's frame: header, user links with the theme toggle, breadcrumbs
    assert browser.find_element(By.ID, "site-name").text
    assert browser.find_elements(By.CSS_SELECTOR, "#user-tools .theme-toggle")
    crumbs = browser.find_element(By.CSS_SELECTOR, "div.breadcrumbs")
    assert [a.text for a in crumbs.find_elements(By.TAG_NAME, "a")] == ["Home", "Reconciliation"]
    assert crumbs.text.endswith("Report")
    assert "--body-fg" in browser.page_source or browser.execute_script(
        "return getComputedStyle(document.documentElement).getPropertyValue('--body-fg')")

    # the drift chart of the SKU: labelled axes, ticks in order, the repair marked
    svg = browser.find_element(By.CSS_SELECTOR, f"#series-{sku_id} svg")
    x_labels = [t.text for t in svg.find_elements(By.CSS_SELECTOR, "text.x-tick")]
    assert len(x_labels) >= 2 and all(re.fullmatch(r"(\d\d-\d\d )?\d\d:\d\d(:\d\d)?", s) for s in x_labels), x_labels
    xs = [float(t.get_attribute("x")) for t in svg.find_elements(By.CSS_SELECTOR, "text.x-tick")]
    assert xs == sorted(xs)
    assert svg.find_element(By.CSS_SELECTOR, "text.x-title").text == "run start time (UTC)"  # the server's zone
    assert svg.find_element(By.CSS_SELECTOR, "text.y-title").text == "drift (units)"
    assert [t.text for t in svg.find_elements(By.CSS_SELECTOR, "text.y-tick")][:1] == ["-4"]
    repairs = svg.find_elements(By.CSS_SELECTOR, "polygon.repair")
    assert len(repairs) == 1
    assert f"Run #{runs[1].pk} at" in repairs[0].find_element(By.TAG_NAME, "title").get_attribute("textContent")
    assert len(svg.find_elements(By.CSS_SELECTOR, "circle.dot")) == 3

    # the bucket history of the same SKU, with its legend
    buckets = browser.find_element(By.ID, f"buckets-{sku_id}")
    assert {b.get_attribute("class") for b in buckets.find_elements(By.CSS_SELECTOR, "polygon.band")} == {
        "band band-sold", "band band-locked", "band band-frozen", "band band-available"}
    assert buckets.find_element(By.CSS_SELECTOR, "text.y-title").text == "units"
    assert [li.text for li in buckets.find_elements(By.CSS_SELECTOR, "#bucket-legend li")][:4] == [
        "available", "frozen", "locked", "sold"]

    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1400, min(max(height + 120, 1000), 3000))
    browser.save_screenshot(str(SCREENSHOT))

    # dark mode (the admin's toggle) recolours the charts through the CSS variables
    def fill() -> str:
        return browser.execute_script("return getComputedStyle(arguments[0]).fill",
                                      svg.find_element(By.CSS_SELECTOR, "text.y-title"))

    light = fill()
    for _ in range(3):  # the toggle cycles auto -> light -> dark
        if browser.execute_script("return document.documentElement.dataset.theme") == "dark":
            break
        browser.find_element(By.CSS_SELECTOR, "#user-tools .theme-toggle").click()
    assert browser.execute_script("return document.documentElement.dataset.theme") == "dark"
    assert fill() != light
    browser.save_screenshot(str(ROOT / "var" / "test-logs" / "report-dark.png"))

    # the run page: one level deeper in the breadcrumbs
    browser.get(f"{base}/reconciliation/runs/{runs[1].pk}/")
    crumbs = browser.find_element(By.CSS_SELECTOR, "div.breadcrumbs")
    assert [a.text for a in crumbs.find_elements(By.TAG_NAME, "a")] == ["Home", "Reconciliation", "Report"]
    assert crumbs.text.endswith(f"Run #{runs[1].pk}")
    assert "Redis below MySQL" in browser.find_element(By.ID, "findings").text


@pytest.fixture(scope="module")
def shanghai_web(process_env):
    """A gunicorn like the `web` fixture's, with TIME_ZONE=Asia/Shanghai."""
    proc = start_web(process_env, name="web-shanghai", TIME_ZONE="Asia/Shanghai")
    yield proc
    proc.stop()


@pytest.fixture
def chinese_browser():
    driver, profile = chromium(lang="zh-CN")
    yield driver
    chromium_quit(driver, profile)


def open_report_in_shanghai(chinese_browser, shanghai_web, make_sku):
    sku_id, runs = drifting_history(make_sku)
    base = f"http://127.0.0.1:{shanghai_web.port}"
    user, pw = make_staff("support")
    login(chinese_browser, base, user, pw)
    chinese_browser.get(f"{base}/reconciliation/?sku={sku_id}")
    return sku_id, runs


def test_report_times_are_in_the_server_time_zone_for_a_chinese_reader(chinese_browser, shanghai_web, make_sku,
                                                                      live_db):
    from selenium.webdriver.common.by import By

    sku_id, runs = open_report_in_shanghai(chinese_browser, shanghai_web, make_sku)
    page = chinese_browser
    assert page.find_element(By.TAG_NAME, "html").get_attribute("lang") == "zh-hans"
    assert page.find_elements(By.CSS_SELECTOR, "div.breadcrumbs a")

    repaired = runs[1]
    local = repaired.started_at.astimezone(SHANGHAI)
    stamp = page.find_element(By.CSS_SELECTOR, f"#run-{repaired.pk} time")
    assert stamp.text == local.strftime("%Y-%m-%d %H:%M:%S")
    assert stamp.get_attribute("datetime").endswith("+08:00")
    latest = page.find_element(By.CSS_SELECTOR, "#latest-run time")
    assert latest.get_attribute("datetime").endswith("+08:00")
    assert latest.text == runs[2].finished_at.astimezone(SHANGHAI).strftime("%Y-%m-%d %H:%M:%S")

    svg = page.find_element(By.CSS_SELECTOR, f"#series-{sku_id} svg")
    assert "Asia/Shanghai" in svg.find_element(By.CSS_SELECTOR, "text.x-title").text
    tick_titles = [t.get_attribute("textContent") for t in svg.find_elements(By.CSS_SELECTOR, "text.x-tick title")]
    assert tick_titles and all(t.endswith("+0800") for t in tick_titles)
    marker = svg.find_element(By.CSS_SELECTOR, "polygon.repair title").get_attribute("textContent")
    assert local.strftime("%Y-%m-%d %H:%M:%S") in marker
    # the axis labels are the Shanghai wall clock: the repair run's hour is among them or between two
    hours = {int(m) for m in re.findall(r"(\d\d):\d\d", " ".join(
        t.text for t in svg.find_elements(By.CSS_SELECTOR, "text.x-tick")))}
    assert hours & {local.hour, (local.hour + 1) % 24, (local.hour - 1) % 24}
    assert "UTC" not in page.find_element(By.ID, "content").text


def test_report_labels_are_chinese_for_a_chinese_reader(chinese_browser, shanghai_web, make_sku, live_db):
    from selenium.webdriver.common.by import By

    sku_id, _ = open_report_in_shanghai(chinese_browser, shanghai_web, make_sku)
    cjk = re.compile(r"[\u4e00-\u9fff]")
    crumbs = chinese_browser.find_element(By.CSS_SELECTOR, "div.breadcrumbs").text
    assert "Reconciliation" not in crumbs and cjk.search(crumbs)
    svg = chinese_browser.find_element(By.CSS_SELECTOR, f"#series-{sku_id} svg")
    for title in ("text.x-title", "text.y-title"):
        assert cjk.search(svg.find_element(By.CSS_SELECTOR, title).text)
    headers = [th.text for th in chinese_browser.find_elements(By.CSS_SELECTOR, "#sku-rows th")]
    assert all(cjk.search(h) for h in headers if h not in ("SKU", "Redis", "MySQL"))
    assert cjk.search(chinese_browser.find_element(By.ID, "bucket-legend").text)
