"""ensure_admin: the admin user a deployment starts with, from its environment."""
from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import override_settings

from testsupport.factories import unique


def ensure_admin() -> str:
    out = io.StringIO()
    call_command("ensure_admin", stdout=out)
    return out.getvalue()


@override_settings(SECKILL_DEMO_USERS=False)
@pytest.mark.parametrize("password", [None, "", "admin", "Seckill", "eleven-char", "<the user name>"])
def test_outside_local_settings_a_missing_short_or_default_password_is_refused(live_db, monkeypatch, password):
    name = unique("root")  # 15 characters: long enough, but the user name itself
    monkeypatch.setenv("SECKILL_ADMIN_USER", name)
    if password is None:
        monkeypatch.delenv("SECKILL_ADMIN_PASSWORD", raising=False)
    else:
        monkeypatch.setenv("SECKILL_ADMIN_PASSWORD", name if password == "<the user name>" else password)
    with pytest.raises(CommandError, match="SECKILL_ADMIN_PASSWORD"):
        ensure_admin()
    assert not get_user_model().objects.filter(username=name).exists()


@override_settings(SECKILL_DEMO_USERS=False)
def test_the_admin_is_created_once_and_keeps_its_password(live_db, monkeypatch):
    name = unique("root")
    monkeypatch.setenv("SECKILL_ADMIN_USER", name)
    monkeypatch.setenv("SECKILL_ADMIN_PASSWORD", "a-long-and-real-one-42")
    out = ensure_admin()
    assert out == f"admin user {name} created\n"  # never the password
    monkeypatch.setenv("SECKILL_ADMIN_PASSWORD", "admin")  # a later run, another value: nothing changes
    assert ensure_admin() == f"admin user {name} exists (password unchanged)\n"
    admin = get_user_model().objects.get(username=name)
    assert admin.is_superuser and admin.is_staff and admin.check_password("a-long-and-real-one-42")
    assert get_user_model().objects.filter(username=name).count() == 1


@override_settings(SECKILL_DEMO_USERS=False)
def test_a_name_taken_by_an_ordinary_user_is_not_promoted(live_db, monkeypatch):
    name = unique("buyer")
    get_user_model().objects.create_user(username=name, password="theirs-000000")
    monkeypatch.setenv("SECKILL_ADMIN_USER", name)
    monkeypatch.setenv("SECKILL_ADMIN_PASSWORD", "a-long-and-real-one-42")
    with pytest.raises(CommandError, match="not an active superuser"):
        ensure_admin()
    user = get_user_model().objects.get(username=name)
    assert not user.is_superuser and not user.is_staff and user.check_password("theirs-000000")


def test_under_local_settings_the_demo_default_is_allowed(live_db, monkeypatch):
    name = unique("root")
    monkeypatch.setenv("SECKILL_ADMIN_USER", name)
    monkeypatch.delenv("SECKILL_ADMIN_PASSWORD", raising=False)
    assert ensure_admin() == f"admin user {name} created\n"
    assert get_user_model().objects.get(username=name).check_password("admin")
