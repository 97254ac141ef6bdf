"""System checks of inventory's data (`manage.py check`, and every command
that runs the checks)."""
from __future__ import annotations

from django.core import checks
from django.db import DatabaseError

SHOWN = 20


@checks.register()
def sku_ids_in_alphabet(app_configs=None, **_kwargs) -> list[checks.CheckMessage]:
    """A Warning naming the live SKUs whose id is outside the SKU-id alphabet
    (made before it was enforced; migration 0013 reported them too): the API
    refuses them, the fencing of a new Redis instance skips them, and a Redis
    Cluster cannot sell them. One read of the live ids; nothing is said while
    the database cannot answer (before `migrate`, or down: other checks and
    the health check say so)."""
    if app_configs is not None and not any(c.label == "inventory" for c in app_configs):
        return []
    from inventory.selectors import sku_ids_live_outside_alphabet

    try:
        outside = sku_ids_live_outside_alphabet()
    except DatabaseError:
        return []
    if not outside:
        return []
    shown = ", ".join(repr(s) for s in outside[:SHOWN]) + (" ..." if len(outside) > SHOWN else "")
    return [checks.Warning(
        f"{len(outside)} live SKU id(s) outside the SKU-id alphabet (1 to 64 characters of A-Z a-z 0-9 . _ -): "
        f"{shown}",
        hint="The API refuses these ids (400 invalid) and a Redis Cluster cannot sell them. Let their orders "
             "finish, end each SKU (status ended in the admin) and create its stock again under an id of the "
             "alphabet (docs/operations.md, upgrading).",
        id="inventory.W001")]
