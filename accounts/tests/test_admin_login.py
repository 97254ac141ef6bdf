"""The admin login is rate limited (django-axes): repeated failures lock it out,
per user and client address (behind a trusted proxy: the real client's)."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.test import Client, override_settings

from core.client import parse_trusted_proxies
from testsupport.factories import unique


def test_repeated_failed_admin_logins_lock_the_account_out(live_db, settings):
    name = unique("staff")
    get_user_model().objects.create_user(username=name, password="right-password-1", is_staff=True)
    c = Client(REMOTE_ADDR="10.20.30.40")
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        r = c.post("/admin/login/?next=/admin/", {"username": name, "password": "wrong"})
        assert r.status_code == 200  # the form again, with its error
    assert c.post("/admin/login/?next=/admin/", {"username": name, "password": "wrong"}).status_code == 429
    locked = c.post("/admin/login/?next=/admin/", {"username": name, "password": "right-password-1"})
    assert locked.status_code == 429
    assert "_auth_user_id" not in c.session
    other = Client(REMOTE_ADDR="10.20.30.41")  # locked by user and address: another address may try
    ok = other.post("/admin/login/?next=/admin/", {"username": name, "password": "right-password-1"})
    assert ok.status_code == 302 and "_auth_user_id" in other.session


@override_settings(SECKILL_TRUSTED_PROXIES=parse_trusted_proxies("10.0.0.0/8"))
def test_behind_the_proxy_the_lockout_is_per_client_and_cannot_be_dodged_by_spoofing(live_db, settings):
    name = unique("ops")
    get_user_model().objects.create_user(username=name, password="right-password-1", is_staff=True)
    proxy = "10.0.0.2"

    def login(password: str, **meta):
        return Client(**meta).post("/admin/login/?next=/admin/", {"username": name, "password": password})

    for _ in range(settings.AXES_FAILURE_LIMIT):
        login("wrong", REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR="198.51.100.7")
    assert login("right-password-1", REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR="198.51.100.7").status_code == 429
    # Another client behind the same proxy is not locked out.
    assert login("right-password-1", REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR="198.51.100.8").status_code == 302
    # A client that reaches us directly names nobody else by writing the header.
    direct = "203.0.113.9"
    for i in range(settings.AXES_FAILURE_LIMIT):
        login("wrong", REMOTE_ADDR=direct, HTTP_X_FORWARDED_FOR=f"192.0.2.{i + 1}")
    assert login("right-password-1", REMOTE_ADDR=direct, HTTP_X_FORWARDED_FOR="192.0.2.99").status_code == 429
