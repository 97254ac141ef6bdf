"""What the orphan sweep changes in Redis (reconciliation decides the sweep and
calls these): the reservations past their deadline, each given its next one,
and the fences a fencer that died left off the list of fences to send."""
from __future__ import annotations

from inventory.domain import Reservation
from inventory.redis import gate, snapshots as redis_snapshots


def orphans_reschedule(*, sku_id: str, cap: int, ahead_ms: int = 0) -> list[Reservation]:
    """At most `cap` reservations of the SKU past their deadline, each moved to
    its next deadline (further out as it ages), so a slow one is published again
    once per deadline, not on every sweep."""
    return gate.due(sku_id=sku_id, cap=cap, ahead_ms=ahead_ms)


def fences_relist(*, sku_ids: list[str]) -> int:
    """List again the standing fences of these SKUs that are not listed (a
    fence never listed is a marker never sent); how many were listed again."""
    return redis_snapshots.fences_relist(sku_ids=sku_ids)
