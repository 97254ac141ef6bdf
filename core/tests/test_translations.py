"""The zh-hans catalogue is complete, and the Chinese admin names every app
and model in Chinese."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import translation

from testsupport.factories import unique

CATALOGUE = Path(settings.BASE_DIR) / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"


def _entries() -> list[str]:
    """The catalogue's entries without its header (the first)."""
    return CATALOGUE.read_text(encoding="utf-8").split("\n\n")[1:]


def test_every_message_of_the_catalogue_is_translated_and_none_is_fuzzy():
    untranslated = [e for e in _entries() if re.search(r'^msgstr ""\Z', e.strip(), re.M)]
    fuzzy = [e for e in _entries() if re.search(r"^#,.*\bfuzzy\b", e, re.M)]
    assert (untranslated, fuzzy) == ([], [])


@pytest.fixture(autouse=True)
def _language_restored():
    """A request in Chinese leaves its language active in this thread: the next test must not inherit it."""
    with translation.override(settings.LANGUAGE_CODE):
        yield


def _superuser_in_chinese() -> Client:
    user = get_user_model().objects.create_superuser(username=unique("root"), password="pw")
    client = Client(HTTP_ACCEPT_LANGUAGE="zh-hans")
    client.force_login(user)
    return client


def test_the_chinese_admin_index_names_the_apps_in_chinese(live_db):
    page = _superuser_in_chinese().get("/admin/").content.decode()
    for chinese in ("库存", "订单", "对账"):
        assert chinese in page
    for english in ("Inventory", "Orders", "Reconciliation"):
        assert not re.search(rf">\s*{english}\s*<", page, re.I), english


def test_the_chinese_order_list_has_no_english_model_name(live_db):
    page = _superuser_in_chinese().get("/admin/orders/order/").content.decode()
    title = re.search(r"<title>(.*?)</title>", page, re.S).group(1)
    assert "订单" in title and "order" not in title.lower(), title
    heading = re.search(r"<h1>(.*?)</h1>", page, re.S).group(1)
    assert "order" not in heading.lower(), heading
