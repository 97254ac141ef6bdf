"""Small records every layer shares. No I/O here."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reservation:
    """A reservation taken by the gate: what the in-flight entry, the confirm
    message and the confirm all describe (formats: `lua/_lib.lua`, `messages`)."""

    order_id: str
    sku_id: str
    user_id: int
    quantity: int
    idempotency_key: str
    reserved_ms: int
    epoch: int = 0

    @classmethod
    def from_entry(cls, sku_id: str, order_id: str | bytes, entry: str | bytes) -> "Reservation":
        user, qty, ms, epoch, key = _text(entry).split("|", 4)
        return cls(_text(order_id), sku_id, int(user), int(qty), key, int(ms), int(epoch))


def _text(v: str | bytes) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
