"""The ops console as a person sees it, in headless Chromium (Debian's)."""
from __future__ import annotations

import shutil
import tempfile

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from conftest import unique
from inventory.models import Sku

pytestmark = [pytest.mark.browser, pytest.mark.web]


@pytest.fixture
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    profile = tempfile.mkdtemp(prefix="seckill-chromium-")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-quic", f"--user-data-dir={profile}", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"),
                              options=options)
    driver.implicitly_wait(5)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def login(driver, base: str, username: str, password: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{base}/admin/login/")
    driver.find_element(By.NAME, "username").send_keys(username)
    driver.find_element(By.NAME, "password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    # the click does not wait for the login's redirect; the next get must not race it
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 15).until(lambda d: "/admin/login/" not in d.current_url
                                    and d.execute_script("return document.readyState") == "complete")


def make_staff(group: str) -> tuple[str, str]:
    User = get_user_model()
    name = unique(group)
    user = User.objects.create_user(username=name, password="secret-pw", is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    return name, "secret-pw"


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
    browser.get(f"{base}/admin/inventory/sku/dashboard/")
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
