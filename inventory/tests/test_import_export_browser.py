"""Exporting SKUs as a person does, in headless Chromium (Debian's): the file
Chromium downloads matches the database."""
from __future__ import annotations

import csv
import io

import pytest

from inventory.models import Sku
from inventory.services import skus, stock as stock_services
from testsupport import wait_until
from testsupport.browser import browser_login as login
from testsupport.factories import make_staff, unique

pytestmark = [pytest.mark.browser, pytest.mark.web]

BUCKETS = ("total_stock", "available_stock", "frozen_stock", "locked_stock", "sold_stock")


@pytest.fixture
def downloading_browser(tmp_path):
    """The testsupport browser, with downloads going to tmp_path."""
    from testsupport.browser import chromium, chromium_quit

    driver, profile = chromium(prefs={"download.default_directory": str(tmp_path),
                                      "download.prompt_for_download": False, "download.directory_upgrade": True,
                                      "safebrowsing.enabled": False})
    yield driver, tmp_path
    chromium_quit(driver, profile)


def test_ops_exports_the_filtered_sku_list_as_csv(downloading_browser, web, live_db):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser, downloads = downloading_browser
    base = f"http://127.0.0.1:{web.port}"
    prefix = unique("BREXP")
    for i in range(3):
        skus.sku_create(sku_id=f"{prefix}-{i}", stock=20 + i, name=f"Browser {i}")
    stock_services.stock_freeze(sku_id=f"{prefix}-1", quantity=4, reason="hold", actor="t")
    user, password = make_staff("ops")
    login(browser, base, user, password)
    browser.get(f"{base}/admin/inventory/sku/?q={prefix}")
    browser.find_element(By.CSS_SELECTOR, "a.export_link").click()
    Select(browser.find_element(By.NAME, "format")).select_by_visible_text("csv")
    browser.find_element(By.CSS_SELECTOR, "form input[type=submit]").click()

    def downloaded():
        # Chromium may name the file before it has written it: done once no
        # partial download is left and the file has its header and rows.
        files = list(downloads.iterdir())
        done = [p for p in files if p.suffix == ".csv"]
        if not done or any(p.suffix == ".crdownload" for p in files):
            return None
        text = done[0].read_text(encoding="utf-8-sig")
        return text if text.count("\n") >= 4 else None

    text = wait_until(downloaded, timeout=30, what="the CSV download")
    rows = list(csv.DictReader(io.StringIO(text)))
    expected = {s.sku_id: {b: str(getattr(s, b)) for b in BUCKETS}
                for s in Sku.objects.filter(sku_id__startswith=prefix)}
    assert len(expected) == 3
    assert {r["sku_id"]: {b: r[b] for b in BUCKETS} for r in rows} == expected
    assert expected[f"{prefix}-1"]["frozen_stock"] == "4"


def test_ops_imports_a_file_with_one_bad_row_and_nothing_is_applied(browser, web, live_db, tmp_path):
    """Upload a CSV whose third row is bad through the admin's import page:
    the page names row 3 and its field, and no SKU of the file exists anywhere."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from inventory.tests.test_import_export import good_rows, nothing_anywhere

    prefix = unique("BRIMP")
    rows = good_rows(prefix)
    rows[2]["stock"] = "-1"
    path = tmp_path / "skus.csv"
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    base = f"http://127.0.0.1:{web.port}"
    user, password = make_staff("ops")
    login(browser, base, user, password)
    browser.get(f"{base}/admin/inventory/sku/import/")
    browser.find_element(By.NAME, "import_file").send_keys(str(path))
    formats = browser.find_elements(By.NAME, "format")
    if formats and formats[0].tag_name == "select":
        Select(formats[0]).select_by_visible_text("csv")
    browser.find_element(By.CSS_SELECTOR, "form input[type=submit]").click()
    wait_until(lambda: "Give the initial stock (0 or more)." in browser.page_source, timeout=15,
               what="the row errors on the page")
    errors = browser.find_element(By.ID, "content").text
    assert "3" in errors and "stock" in errors.lower()
    assert not browser.find_elements(By.CSS_SELECTOR, "form#confirm-import, input[name=import_file_name]")
    nothing_anywhere([r["sku_id"] for r in rows])
