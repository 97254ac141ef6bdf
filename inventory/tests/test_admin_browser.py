"""The ops console as a person sees it, in headless Chromium (Debian's)."""
from __future__ import annotations

import pytest

from inventory.models import Sku
from testsupport.browser import browser_login as login
from testsupport.factories import make_staff

pytestmark = [pytest.mark.browser, pytest.mark.web]


def test_ops_freezes_ten_units_and_support_is_refused(browser, web, make_sku, live_db):
    from selenium.webdriver.common.by import By

    base = f"http://127.0.0.1:{web.port}"
    sku = make_sku(stock=100, per_user_limit=2, name="Browser phone")
    ops_user, ops_pw = make_staff("ops")
    login(browser, base, ops_user, ops_pw)
    browser.get(f"{base}/admin/inventory/sku/{sku.sku_id}/change/")
    assert "Browser phone" in browser.page_source
    browser.find_element(By.ID, "action-freeze").click()
    browser.find_element(By.NAME, "quantity").send_keys("10")
    browser.find_element(By.NAME, "reason").send_keys("launch reserve")
    browser.find_element(By.CSS_SELECTOR, "#stock-action-form input[type=submit]").click()
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 15).until(lambda d: "/stock/" not in d.current_url)
    # back on the change page: the message and the new buckets, as shown
    assert "10 unit(s) of" in browser.find_element(By.CSS_SELECTOR, ".messagelist").text
    frozen = browser.find_element(By.CSS_SELECTOR, ".field-frozen_stock .readonly").text
    available = browser.find_element(By.CSS_SELECTOR, ".field-available_stock .readonly").text
    redis_available = browser.find_element(By.CSS_SELECTOR, ".field-redis_available .readonly").text
    assert (frozen, available, redis_available) == ("10", "90", "90")
    browser.get(f"{base}/admin/dashboard/")
    row = browser.find_element(By.ID, f"sku-{sku.sku_id}")
    assert row.find_element(By.CSS_SELECTOR, ".frozen").text == "10"
    row = Sku.objects.get(pk=sku.sku_id)
    assert (row.frozen_stock, row.available_stock) == (10, 90)

    browser.delete_all_cookies()
    support_user, support_pw = make_staff("support")
    login(browser, base, support_user, support_pw)
    browser.get(f"{base}/admin/inventory/sku/{sku.sku_id}/change/")
    assert browser.find_elements(By.ID, "action-freeze") == []  # no button for support
    browser.get(f"{base}/admin/inventory/sku/{sku.sku_id}/stock/freeze/")
    assert "403" in browser.title or "Forbidden" in browser.page_source
    assert Sku.objects.get(pk=sku.sku_id).frozen_stock == 10
