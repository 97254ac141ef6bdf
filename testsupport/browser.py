"""Debian's headless Chromium driven by Selenium, and logging in through the admin as a person does."""
from __future__ import annotations

import os

import pytest

# Selenium uses Debian's chromium and chromedriver: it must neither fetch a
# driver nor send usage statistics.
os.environ.setdefault("SE_AVOID_STATS", "true")
os.environ.setdefault("SE_OFFLINE", "true")


def chromium(*, lang: str | None = None, prefs: dict | None = None):
    """Debian's headless Chromium, driven by Debian's chromedriver, sending no
    statistics; `lang` is the language it asks pages for, `prefs` more of its
    preferences (e.g. a download folder). Returns (driver, profile folder)."""
    import shutil
    import tempfile

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    profile = tempfile.mkdtemp(prefix="seckill-chromium-")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-quic", f"--user-data-dir={profile}", "--window-size=1400,1000"):
        options.add_argument(flag)
    prefs = dict(prefs or {})
    if lang:
        options.add_argument(f"--lang={lang}")
        prefs["intl.accept_languages"] = f"{lang},zh"
    if prefs:
        options.add_experimental_option("prefs", prefs)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"),
                              options=options)
    driver.implicitly_wait(5)
    return driver, profile


def chromium_quit(driver, profile: str) -> None:
    import shutil

    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def browser():
    driver, profile = chromium()
    yield driver
    chromium_quit(driver, profile)


def browser_login(driver, base: str, username: str, password: str) -> None:
    """Log in through the admin's login form, as a person does."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{base}/admin/login/")
    driver.find_element(By.NAME, "username").send_keys(username)
    driver.find_element(By.NAME, "password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    # the click does not wait for the login's redirect; the next get must not race it
    WebDriverWait(driver, 15).until(lambda d: "/admin/login/" not in d.current_url
                                    and d.execute_script("return document.readyState") == "complete")
