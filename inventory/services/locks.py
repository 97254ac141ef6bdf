"""The one place stock rows are locked."""
from __future__ import annotations

from collections.abc import Iterable

from inventory.models import Sku


def skus_lock(*, sku_ids: Iterable[str]) -> dict[str, Sku]:
    """Lock SKU rows, always in primary-key order and before any order row, so
    no two paths can deadlock each other. Not after the order row either: the
    foreign-key checks of the log and outbox inserts take a shared lock on the
    SKU row first, and two transactions upgrading it to exclusive deadlock."""
    ids = sorted(set(sku_ids))
    return {s.sku_id: s for s in Sku.objects.select_for_update().filter(pk__in=ids).order_by("pk")}


def skus_lock_nowait(*, sku_id: str) -> Sku | None:
    """Lock one SKU row unless another transaction holds it (then None): for
    work that any holder of the row will do anyway (the bucket mover)."""
    return Sku.objects.select_for_update(skip_locked=True).filter(pk=sku_id).first()
