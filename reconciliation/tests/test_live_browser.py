"""The live sale view as ops watch it on launch day, in headless Chromium: a sale
moves the figures on the page while the page itself is never reloaded."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from testsupport import ROOT, wait_until
from testsupport.browser import browser_login as login
from testsupport.factories import make_staff
from testsupport.http import sell

pytestmark = [pytest.mark.browser, pytest.mark.web, pytest.mark.worker]

SCREENSHOT = ROOT / "docs" / "screenshots" / "live-sale.png"


def test_a_sale_moves_the_live_view_without_a_reload(browser, web, worker, make_sku, make_buyers, api, live_db):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from orders.models import Order

    sku = make_sku(stock=40, per_user_limit=1, name="Launch phone")
    buyers = make_buyers(12)
    base = f"http://127.0.0.1:{web.port}"
    login(browser, base, *make_staff("support"))
    browser.get(f"{base}/admin/dashboard/")
    row = browser.find_element(By.ID, f"sku-{sku.sku_id}")
    assert row.find_element(By.CSS_SELECTOR, ".taken").text == "0"
    assert row.find_element(By.CSS_SELECTOR, ".available").text == "40"
    # A marker the page would lose on a reload, and the JS's own load time.
    browser.execute_script("window.__liveMarker = 'still here';")
    loaded_at = browser.execute_script("return window.seckillLive.loadedAt")
    WebDriverWait(browser, 15).until(lambda d: d.execute_script("return window.seckillLive.polls") >= 1)

    results = sell(web.port, [t for _, t in buyers], sku.sku_id)
    accepted = [body for status, body in results if status == 202]
    assert len(accepted) == 12, results
    # Three buyers pay: the mover moves their units from locked to sold.
    by_token = dict(zip([t for _, t in buyers], results))
    for token in list(by_token)[:3]:
        order_id = by_token[token][1]["order_id"]
        wait_until(lambda order_id=order_id: Order.objects.filter(pk=order_id, status="PENDING_PAYMENT").exists(),
                   what="confirmed")
        assert api(token).post(f"/api/v1/orders/{order_id}/pay", {}, format="json").status_code == 200

    # The page follows by itself: taken, the clicks per second, then the buckets.
    WebDriverWait(browser, 20, poll_frequency=0.1).until(
        lambda d: d.find_element(By.CSS_SELECTOR, f"#sku-{sku.sku_id} .taken").text == "12")
    WebDriverWait(browser, 20, poll_frequency=0.1).until(
        lambda d: (d.find_element(By.CSS_SELECTOR, f"#sku-{sku.sku_id} .locked").text,
                   d.find_element(By.CSS_SELECTOR, f"#sku-{sku.sku_id} .sold").text) == ("9", "3"))
    row = browser.find_element(By.ID, f"sku-{sku.sku_id}")
    assert row.find_element(By.CSS_SELECTOR, ".available").text == "28"
    assert row.find_element(By.CSS_SELECTOR, ".redis").text == "28"
    assert row.find_element(By.CSS_SELECTOR, ".inflight").text == "0"
    width = browser.execute_script(
        "return document.querySelector(arguments[0]).style.width", f"#sku-{sku.sku_id} .seg-sold")
    assert width == "7.5%"  # 3 of 40
    # The clicks per second were measured from two readings around the sale.
    peak = browser.execute_script("return window.seckillLive.peaks[arguments[0]]", sku.sku_id)
    assert peak and peak > 0

    # Never reloaded: the marker, the JS's start and one navigation entry remain.
    assert browser.execute_script("return window.__liveMarker") == "still here"
    assert browser.execute_script("return window.seckillLive.loadedAt") == loaded_at
    assert browser.execute_script("return performance.getEntriesByType('navigation').length") == 1
    assert browser.execute_script("return window.seckillLive.polls") >= 2
    assert "live-bad" not in browser.find_element(By.ID, "live-state").get_attribute("class")

    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    browser.set_window_size(1500, 900)
    time.sleep(1.2)  # past the row's flash
    browser.save_screenshot(str(SCREENSHOT))
    assert Path(SCREENSHOT).stat().st_size > 10_000
    # The admin's dark theme (its toggle sets this attribute): the page follows without a reload.
    browser.execute_script("document.documentElement.dataset.theme = 'dark'")
    time.sleep(0.3)
    browser.save_screenshot(str(SCREENSHOT.with_name("live-sale-dark.png")))
