"""Writes of the accounts app: the admin user a deployment starts with."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import transaction

# Passwords a person tries first; refused wherever default passwords are not allowed.
WEAK_PASSWORDS = {"admin", "password", "ops", "support", "changeme", "seckill"}
ADMIN_MIN_LENGTH = 12


class AdminPasswordRefused(ValueError):
    """The admin password given is missing, short, a default, or fails the validators."""


class AdminNotSuperuser(ValueError):
    """A user of the admin's name exists but is no active superuser: nothing is changed."""


def admin_password_check(*, username: str, password: str) -> None:
    """Raise AdminPasswordRefused unless `password` may guard a superuser
    outside the demo: 12 or more characters, not a default, and the project's
    password validators pass."""
    if len(password) < ADMIN_MIN_LENGTH or password.lower() in WEAK_PASSWORDS or password.lower() == username.lower():
        raise AdminPasswordRefused(f"SECKILL_ADMIN_PASSWORD must be set to a password of {ADMIN_MIN_LENGTH} or more "
                                   "characters (no default password here)")
    try:
        validate_password(password, user=get_user_model()(username=username))
    except ValidationError as exc:
        raise AdminPasswordRefused("SECKILL_ADMIN_PASSWORD: " + " ".join(exc.messages)) from exc


def admin_ensure(*, username: str, password: str, defaults_allowed: bool) -> bool:
    """Create the superuser `username` once; True when created now.

    An existing user keeps its password (ops may have changed it since), so
    running this at every deployment is harmless. A user of that name that is
    not an active superuser is refused rather than promoted: the name may
    belong to somebody else. Without `defaults_allowed` (every settings module
    but the local demo) the password is checked before anything is written."""
    User = get_user_model()
    with transaction.atomic():
        existing = User.objects.select_for_update().filter(username=username).first()
        if existing is not None:
            if not (existing.is_superuser and existing.is_active):
                raise AdminNotSuperuser(f"user {username} exists but is not an active superuser; "
                                        "left unchanged (choose another SECKILL_ADMIN_USER)")
            return False
        if not defaults_allowed:
            admin_password_check(username=username, password=password)
        User.objects.create_superuser(username=username, email="", password=password)
        return True
