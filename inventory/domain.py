"""Small records every layer shares, the fences and their names, and the
SKU-id alphabet. No I/O here."""
from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy

from core.redis.keys import text

# The in-flight entry's head since it carries the unit price (lua/_lib.lua).
_INFLIGHT_V2 = "v2|"
CENTS = Decimal("0.01")

# The SKU-id alphabet (the contract's): every key of a SKU carries its id as
# the Redis Cluster hash tag `{<sku>}` (inventory.redis.keys), so no brace may
# be in it (an id starting with `}` makes an empty tag, its keys spread over
# slots and every script on them is CROSSSLOT); no `@` (where fences are
# listed and sent, a claims fence is `@claims:<tag>`: `fence_name`); no SCAN glob character;
# nothing a URL path or a spreadsheet cell could read otherwise. Written with
# plain ranges, so Python, JSON Schema (ECMA 262) and Rust's regex read it alike.
SKU_ID_MAX = 64
SKU_ID_PATTERN = f"^[A-Za-z0-9._-]{{1,{SKU_ID_MAX}}}$"
SKU_ID_RULE = gettext_lazy("A SKU id is 1 to 64 characters of A-Z, a-z, 0-9, dot (.), underscore (_) and "
                           "hyphen (-).")
# fullmatch: `$` alone would also let a final newline through.
_sku_id_fullmatch = re.compile(SKU_ID_PATTERN).fullmatch


def sku_id_valid(sku_id: object) -> bool:
    """Is this an id of the alphabet? Ids made before it was enforced may be
    outside it (the migration and `manage.py check` list them)."""
    return type(sku_id) is str and _sku_id_fullmatch(sku_id) is not None


def validate_sku_id(value: object) -> None:
    """The model field's validator (`Sku.sku_id`: full_clean, the admin form)."""
    if not sku_id_valid(value):
        raise ValidationError(SKU_ID_RULE, code="invalid_sku_id")


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
    def from_entry(cls, sku_id: str, order_id: str | bytes, entry: str | bytes) -> Reservation:
        fields = text(entry)
        if fields.startswith(_INFLIGHT_V2):
            user, qty, ms, epoch, price, key = fields[len(_INFLIGHT_V2):].split("|", 5)
        else:
            (user, qty, ms, epoch, key), price = fields.split("|", 4), ""
        return cls(text(order_id), sku_id, int(user), int(qty), key, int(ms), int(epoch), price)


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


@dataclass(frozen=True)
class SkuFence:
    """The fence over a SKU whose snapshot Redis lost: its rebuild waits until
    the fence comes out of the SKU's partition of the confirm stream."""

    sku_id: str


@dataclass(frozen=True)
class ClaimsFence:
    """The fence over a lost shard's key claims (accounts.token_cache): it
    comes out of every partition of the confirm stream before it is lifted."""

    shard_tag: str  # "" for the one Redis


Fence = SkuFence | ClaimsFence

# A fence is named by these two functions alone, wherever a name carries it:
# the list of fences to send (inventory.redis.snapshots) and a fence message's
# body (inventory.messages). A SKU's fence is its SKU's id, a shard's claims
# fence "@claims:<shard tag>" (no SKU id holds an "@"): the names an earlier
# version listed in Redis and sent into queues that may still hold them.
_CLAIMS_FENCE_NAME = "@claims:"


def fence_name(fence: Fence) -> str:
    if isinstance(fence, ClaimsFence):
        return _CLAIMS_FENCE_NAME + fence.shard_tag
    return fence.sku_id


def fence_named(name: str) -> Fence:
    if name.startswith(_CLAIMS_FENCE_NAME):
        return ClaimsFence(name[len(_CLAIMS_FENCE_NAME):])
    return SkuFence(name)
