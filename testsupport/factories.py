"""Unique ids and the rows a test makes for itself: SKUs, buyers with tokens, staff users."""
from __future__ import annotations

import uuid

import pytest


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def make_sku(live_db):
    from inventory.services.skus import sku_create

    def make(*, stock: int = 10, per_user_limit: int = 1, **kw):
        return sku_create(sku_id=unique("T"), stock=stock, per_user_limit=per_user_limit, **kw)

    return make


@pytest.fixture
def make_buyers(live_db):
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    def make(n: int = 1, *, staff: bool = False) -> list[tuple[object, str]]:
        User = get_user_model()
        out = []
        for _ in range(n):
            user = User.objects.create(username=unique("buyer"), is_staff=staff)
            out.append((user, Token.objects.create(user=user).key))
        return out

    return make


def make_staff(group: str) -> tuple[str, str]:
    """A staff user in the ops or support group; returns (username, password)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    name = unique(group)
    user = get_user_model().objects.create_user(username=name, password="secret-pw", is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    return name, "secret-pw"
