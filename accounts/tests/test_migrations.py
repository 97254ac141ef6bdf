"""Secrets compare as bytes in MySQL (accounts/migrations/0001_exact_secrets),
and the code does not rely on it alone."""
from __future__ import annotations

from django.core.management import call_command
from django.db import connection
from django.test import Client

from testsupport.factories import unique

COLUMNS = {("authtoken_token", "key"), ("django_session", "session_key")}


def _columns() -> dict[tuple[str, str], tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name, column_name, collation_name, column_key FROM information_schema.columns "
            "WHERE table_schema = DATABASE() AND (table_name, column_name) IN "
            "(('authtoken_token', 'key'), ('django_session', 'session_key'))")
        return {(t, c): (coll, key) for t, c, coll, key in cursor.fetchall()}


def test_token_and_session_keys_are_binary_and_keep_their_primary_keys(live_db):
    assert _columns() == dict.fromkeys(COLUMNS, ("utf8mb4_bin", "PRI"))


def test_the_migration_reverses_and_a_case_variant_is_refused_either_way(live_db, api, make_buyers):
    (_, token), = make_buyers(1)
    call_command("migrate", "accounts", "zero", verbosity=0)
    try:
        assert set(_columns().values()) == {("utf8mb4_unicode_ci", "PRI")}
        # The column folds case again; the code still compares exactly.
        assert api(token.upper()).get("/api/v1/orders", REMOTE_ADDR="192.0.2.77").status_code == 401
    finally:
        call_command("migrate", "accounts", verbosity=0)
    assert _columns() == dict.fromkeys(COLUMNS, ("utf8mb4_bin", "PRI"))
    assert api(token).get("/api/v1/orders").status_code == 200


def test_a_case_variant_of_a_session_cookie_is_no_session(live_db):
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(username=unique("staff"), password="pw-1234567", is_staff=True,
                                                is_superuser=True)
    client = Client()
    client.force_login(user)
    assert client.get("/admin/").status_code == 200
    key = client.cookies["sessionid"].value
    variant = Client()
    variant.cookies["sessionid"] = key.upper()
    assert key.upper() != key
    assert variant.get("/admin/").status_code == 302  # to the login page
