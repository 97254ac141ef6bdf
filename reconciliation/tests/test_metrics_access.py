"""/reconciliation/metrics by bearer token is decided by the token alone and
never loads a session: a scraper costs no session lookup, and neither does a
made-up token sent with a made-up session cookie. Without a bearer token the
staff login decides (a session read, as on any admin page)."""
from __future__ import annotations

import uuid
from contextlib import contextmanager
from unittest import mock
from wsgiref.util import setup_testing_defaults

import pytest
from django.test import Client, override_settings

from testsupport.factories import unique

TOKEN = "metrics-access-" + "m3t" * 8
pytestmark = pytest.mark.usefixtures("live_db")


@contextmanager
def sql_sent():
    """Every SQL statement this process sends, whichever connection sends it
    (the WSGI application lends connections of its own, core.connections)."""
    from django.db.backends.utils import CursorWrapper

    seen: list[str] = []
    real = CursorWrapper.execute

    def execute(self, sql, params=None):
        seen.append(sql)
        return real(self, sql, params)

    with mock.patch.object(CursorWrapper, "execute", execute):
        yield seen


def touches_sessions_or_users(statements: list[str]) -> bool:
    return any("django_session" in s or "auth_user" in s for s in statements)


def cookie() -> dict:
    return {"HTTP_COOKIE": f"sessionid={uuid.uuid4().hex}"}


@override_settings(SECKILL_METRICS_TOKEN=TOKEN)
def test_a_bearer_request_reads_no_session_right_token_or_wrong():
    for auth, status in ((f"Bearer {TOKEN}", 200), (f"bearer {TOKEN}", 200), ("Bearer made-up", 403),
                         ("Bearer " + "é" * 12, 403), ("Bearer ", 403)):
        with sql_sent() as sql:
            r = Client().get("/reconciliation/metrics", HTTP_AUTHORIZATION=auth, **cookie())
        assert r.status_code == status, (auth, r.status_code)
        assert not touches_sessions_or_users(sql), (auth, [s for s in sql if "session" in s or "auth_user" in s])
        if status == 403:
            assert sql == []  # a wrong token costs MySQL nothing at all


@override_settings(SECKILL_METRICS_TOKEN=TOKEN)
def test_the_scrape_costs_the_same_queries_with_or_without_a_session_cookie():
    with sql_sent() as bare:
        assert Client().get("/reconciliation/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200
    with sql_sent() as with_cookie:
        assert Client().get("/reconciliation/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}",
                            **cookie()).status_code == 200
    assert len(with_cookie) == len(bare) and not touches_sessions_or_users(with_cookie)


def call(path: str, **headers: str) -> tuple[str, dict[str, list[str]], bytes]:
    from seckill_site.wsgi import application

    environ: dict = {"PATH_INFO": path, "REQUEST_METHOD": "GET", "HTTP_HOST": "localhost", **headers}
    setup_testing_defaults(environ)
    seen: dict = {}

    def start_response(status, response_headers, exc_info=None):
        seen["status"], seen["headers"] = status, {}
        for name, value in response_headers:
            seen["headers"].setdefault(name.lower(), []).append(value)

    body = b"".join(application(environ, start_response))
    return seen["status"], seen["headers"], body


@override_settings(SECKILL_METRICS_TOKEN=TOKEN)
def test_the_web_application_serves_a_scrape_without_the_session_chain():
    with sql_sent() as sql:
        status, headers, body = call("/reconciliation/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}", **cookie())
    assert status.startswith("200") and b"seckill_reconciliation_runs_total" in body
    assert not touches_sessions_or_users(sql)
    assert "set-cookie" not in headers and "cookie" not in ",".join(headers.get("vary", [])).lower()
    assert "x-frame-options" not in headers  # the API's chain, not the site's
    # without a bearer token: the site's chain, which reads the session a browser sent
    with sql_sent() as sql:
        status, _, _ = call("/reconciliation/metrics", **cookie())
    assert status.startswith("403") and any("django_session" in s for s in sql)


@override_settings(SECKILL_METRICS_TOKEN=TOKEN)
def test_a_staff_login_still_reads_the_metrics_and_a_wrong_token_beside_it_does_not():
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    user = get_user_model().objects.create_user(username=unique("metrics-staff"), password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(content_type__app_label="reconciliation",
                                                     codename="view_reconciliationrun"))
    browser = Client()
    browser.force_login(user)
    assert browser.get("/reconciliation/metrics").status_code == 200
    # a bearer token is the token's request: a wrong one is refused without a look at the session
    with sql_sent() as sql:
        assert browser.get("/reconciliation/metrics", HTTP_AUTHORIZATION="Bearer made-up").status_code == 403
    assert sql == []
