"""The confirm stream's bodies: reservations or fences as small JSON, signed
with SECKILL_TASK_SIGNING_KEY, and their reading. A message that is not ours
or not well formed is a BadMessage: set aside, never applied."""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from inventory import signing
from inventory.domain import Fence, Reservation, fence_name, fence_named
from inventory.messages.names import CONFIRM_KIND, FENCE_KIND, KIND_HEADER, SIGNATURE_HEADER

# Version 2 rows end with the unit price; a version 1 message (an older
# release's, which kept no prices) still reads, its reservations without a price.
FORMAT_VERSION = 2
_READS = (1, 2)
# A fence's body is the same in both versions: it keeps version 1, which an
# older worker still reads during an upgrade.
FENCE_FORMAT_VERSION = 1


class BadMessage(Exception):
    """A confirm message that is not ours or not well formed: set aside, never applied."""


def confirm_encode(reservations: Sequence[Reservation]) -> tuple[bytes, dict[str, str]]:
    rows = [[r.order_id, r.sku_id, r.user_id, r.quantity, r.reserved_ms, r.epoch, r.idempotency_key, r.unit_price]
            for r in reservations]
    body = json.dumps({"v": FORMAT_VERSION, "r": rows}, separators=(",", ":")).encode()
    return body, {SIGNATURE_HEADER: signing.sign_bytes(body), KIND_HEADER: CONFIRM_KIND}


def fence_encode(fences: Sequence[tuple[Fence, str]]) -> tuple[bytes, dict[str, str]]:
    """(fence, token) pairs, each fence by its name (inventory.domain.fence_name;
    inventory.services.snapshots.fence_pass)."""
    rows = [[fence_name(fence), token] for fence, token in fences]
    body = json.dumps({"v": FENCE_FORMAT_VERSION, "f": rows}, separators=(",", ":")).encode()
    return body, {SIGNATURE_HEADER: signing.sign_bytes(body), KIND_HEADER: FENCE_KIND}


@dataclass(frozen=True)
class Decoded:
    reservations: list[Reservation]
    fences: list[tuple[Fence, str]]


def message_decode(body: bytes | str, headers: dict | None) -> Decoded:
    """A message of the confirm queue: reservations, or fences."""
    headers = headers or {}
    if isinstance(body, str):  # py-amqp decodes bodies that declare a text encoding
        body = body.encode("utf-8")
    try:
        signing.verify_bytes(body, headers.get(SIGNATURE_HEADER))
        data = json.loads(body)
        if data.get("v") not in _READS:
            raise BadMessage(f"unknown format version {data.get('v')!r}")
        if headers.get(KIND_HEADER) == FENCE_KIND:
            fences = [(sku, token) for sku, token in data["f"]]
            if not all(isinstance(x, str) for f in fences for x in f):
                raise BadMessage("malformed fence")
            return Decoded([], [(fence_named(name), token) for name, token in fences])
        out = []
        width = 7 if data["v"] == 1 else 8
        for row in data["r"]:
            if len(row) != width:
                raise BadMessage("malformed reservation")
            oid, sku, user, qty, ms, epoch, key, price = (*row, "") if width == 7 else row
            if not all(isinstance(x, str) for x in (oid, sku, key, price)):
                raise BadMessage("malformed reservation")
            out.append(Reservation(oid, sku, int(user), int(qty), key, int(ms), int(epoch), price))
        return Decoded(out, [])
    except signing.BadSignature as exc:
        raise BadMessage(str(exc)) from exc
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BadMessage(f"{exc.__class__.__name__}: {exc}") from exc


def confirm_decode(body: bytes | str, headers: dict | None) -> list[Reservation]:
    return message_decode(body, headers).reservations
