"""Small records every layer shares. No I/O here."""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

# The in-flight entry's head since it carries the unit price (lua/_lib.lua).
_INFLIGHT_V2 = "v2|"
CENTS = Decimal("0.01")


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
    # The snapshot's price when the gate took the units (decimal text); ""
    # when the snapshot had none (loaded before prices were kept): the
    # confirm then records the SKU's price of that moment.
    unit_price: str = ""

    @classmethod
    def from_entry(cls, sku_id: str, order_id: str | bytes, entry: str | bytes) -> "Reservation":
        text = _text(entry)
        if text.startswith(_INFLIGHT_V2):
            user, qty, ms, epoch, price, key = text[len(_INFLIGHT_V2):].split("|", 5)
        else:
            (user, qty, ms, epoch, key), price = text.split("|", 4), ""
        return cls(_text(order_id), sku_id, int(user), int(qty), key, int(ms), int(epoch), price)


def price_text(price: Decimal | int | str) -> str:
    """A price as the stores carry it: decimal text with two places ("199.00")."""
    return str(Decimal(price).quantize(CENTS))


def price_of(text: str) -> Decimal | None:
    """The Decimal of a carried price, None for "" or anything not a price."""
    try:
        value = Decimal(text)
    except (InvalidOperation, TypeError, ValueError):
        return None
    return value.quantize(CENTS) if value.is_finite() and value >= 0 else None


def order_tag(sku_id: str) -> str:
    """The head of every order id minted for this SKU: 8 hex digits of the
    CRC-32 of its id (the same figure inventory.Sku.order_tag computes in
    MySQL), so an order still in flight can be found from its id alone."""
    return f"{zlib.crc32(sku_id.encode()):08x}"


def _text(v: str | bytes) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
