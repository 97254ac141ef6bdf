"""The admin login is rate limited (django-axes): repeated failures lock it out."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.test import Client

from conftest import unique


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
