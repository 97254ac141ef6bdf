"""The gate: reserve, undo, the confirm consumer's hold and settle, the
orphan sweep's due list, in-flight reads, and the moves that give, freeze or
adjust available stock (each once per operation id). Key names and return
codes: `keys`."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings

from core.redis.calls import Call
from core.redis.connection import redis
from inventory.domain import Reservation
from inventory.redis.keys import (
    ADJUST_LUA,
    DUE_LUA,
    FREEZE_CANCEL_LUA,
    FREEZE_LUA,
    GIVE_LUA,
    HOLD_LUA,
    META_LUA,
    OBSERVE_LUA,
    RESERVE_LUA,
    SETTLE_LUA,
    UNDO_LUA,
    Freeze,
    FreezeCancel,
    Give,
    Hold,
    Meta,
    Reserve,
    UndoOutcome,
    _chunks,
    _ms,
    _s,
    sku_keys,
)


@dataclass(frozen=True)
class ReserveResult:
    """reserve.lua's answer, parsed (which fields mean something depends on the code)."""

    code: Reserve
    order_id: str = ""
    value: int = 0
    limit: int = 0
    reserved_ms: int = 0
    epoch: int = 0
    wait_ms: int = 0  # DUPLICATE: the first request may still be deciding for this long
    unit_price: str = ""  # OK: the snapshot's price the units were taken at ("" if it had none)


# Beyond the publish budget, this much more (clock rates, scheduling).
DECISION_MARGIN_MS = 500


def decision_window_ms() -> int:
    """How long after its reserve a request may still be deciding: by then its
    publish was confirmed (the message is in the queue) or it gave up and
    undid its take (answered 503, recorded as undone)."""
    return int(settings.SECKILL_PUBLISH_BUDGET_MS) + DECISION_MARGIN_MS


# --- Reservations --------------------------------------------------------------------

def reserve_call(*, sku_id: str, user_id: int, quantity: int, idempotency_key: str, order_id: str) -> Call:
    """The reserve as a call that can ride in a pipeline (see orders' place)."""
    return RESERVE_LUA.call(sku_keys(sku_id), user_id=user_id, quantity=quantity, idempotency_key=idempotency_key,
                            order_id=order_id, grace_ms=_ms("SECKILL_ORPHAN_GRACE_SECONDS"),
                            idempotency_ms=_ms("SECKILL_IDEMPOTENCY_SECONDS"), deciding_ms=decision_window_ms())


def reserve_result(raw) -> ReserveResult:
    code = Reserve(int(raw[0]))
    if code is Reserve.OK:
        return ReserveResult(code, _s(raw[1]), int(raw[2]), reserved_ms=int(raw[3]), epoch=int(raw[4]),
                             unit_price=_s(raw[5]))
    if code is Reserve.DUPLICATE:
        return ReserveResult(code, _s(raw[1]), int(raw[2]), wait_ms=int(raw[3]))
    if code is Reserve.KEY_REUSED:
        return ReserveResult(code, _s(raw[1]))
    if code is Reserve.SOLD_OUT:
        return ReserveResult(code, value=int(raw[1]), epoch=int(raw[2]))
    if code is Reserve.LIMIT_REACHED:
        return ReserveResult(code, value=int(raw[1]), limit=int(raw[2]))
    return ReserveResult(code)


def reserve(*, sku_id: str, user_id: int, quantity: int, idempotency_key: str, order_id: str) -> ReserveResult:
    return reserve_result(reserve_call(sku_id=sku_id, user_id=user_id, quantity=quantity,
                                       idempotency_key=idempotency_key, order_id=order_id).run())


def undo(*, sku_id: str, order_id: str) -> UndoOutcome:
    """Take back a reservation its own request could not publish (undo.lua)."""
    return UndoOutcome(int(UNDO_LUA.run(sku_keys(sku_id), order_id=order_id,
                                        lifetime_ms=_ms("SECKILL_MARKER_LIFETIME_SECONDS"))))


def hold(*, sku_id: str, order_ids: Sequence[str]) -> tuple[dict[str, Hold], list[Reservation]]:
    """Hold reservations for a confirm (hold.lua): a held one can no longer be
    undone by its request. Returns each id's state and the held reservations
    as Redis has them."""
    k = sku_keys(sku_id)
    states: dict[str, Hold] = {}
    items: list[Reservation] = []
    for part in _chunks(list(order_ids)):
        raw = HOLD_LUA.run(k, order_ids=part)
        n = len(part)
        states.update({oid: Hold(_s(raw[i])) for i, oid in enumerate(part)})
        items += [Reservation.from_entry(sku_id, raw[i], raw[i + 1]) for i in range(n, len(raw), 2)]
    return states, items


def settle(*, sku_id: str, confirmed: Sequence[str], dropped: Sequence[str] = (),
           returned: Sequence[str] = ()) -> int:
    """Close reservations the confirm decided (see settle.lua for the three lists:
    confirmed, refused with their unit dropped, refused with their unit returned)."""
    k = sku_keys(sku_id)
    lifetime = _ms("SECKILL_DONE_MARKER_SECONDS")
    settled = 0
    tagged = [(0, o) for o in confirmed] + [(1, o) for o in dropped] + [(2, o) for o in returned]
    for part in _chunks(tagged):
        c = [o for t, o in part if t == 0]
        d = [o for t, o in part if t == 1]
        r = [o for t, o in part if t == 2]
        settled += int(SETTLE_LUA.run(k, confirmed=c, dropped=d, returned=r, lifetime_ms=lifetime))
    return settled


def due(*, sku_id: str, cap: int, ahead_ms: int = 0) -> list[Reservation]:
    """Reservations the orphan sweep should publish again (each gets its next deadline)."""
    raw = DUE_LUA.run(sku_keys(sku_id), cap=cap, grace_ms=_ms("SECKILL_ORPHAN_GRACE_SECONDS"),
                      longest_ms=_ms("SECKILL_ORPHAN_MAX_WAIT_SECONDS"), ahead_ms=ahead_ms)
    return [Reservation.from_entry(sku_id, raw[i], raw[i + 1]) for i in range(0, len(raw), 2)]


def inflight_entries(*, sku_id: str) -> list[Reservation]:
    """Every reservation in flight (tests and the admin; bounded by what is in flight)."""
    raw = redis().hgetall(sku_keys(sku_id).inflight)
    return [Reservation.from_entry(sku_id, oid, e) for oid, e in raw.items()]


def inflight_count(*, sku_ids: Sequence[str]) -> dict[str, int]:
    pipe = redis().pipeline(transaction=False)
    for sku_id in sku_ids:
        pipe.hlen(sku_keys(sku_id).inflight)
    return dict(zip(sku_ids, (int(n) for n in pipe.execute())))


def inflight_find(*, candidates: Sequence[tuple[str, str]]) -> list[Reservation]:
    """Which of these (sku_id, order_id) pairs are in flight (one round trip)."""
    if not candidates:
        return []
    pipe = redis().pipeline(transaction=False)
    for sku_id, order_id in candidates:
        pipe.hget(sku_keys(sku_id).inflight, order_id)
    return [Reservation.from_entry(sku_id, oid, e)
            for (sku_id, oid), e in zip(candidates, pipe.execute()) if e is not None]


def is_settled(*, sku_id: str, order_id: str) -> bool:
    return redis().zscore(sku_keys(sku_id).done, order_id) is not None


def settled_forget(*, sku_id: str, order_id: str) -> None:
    """Drop a reservation's settled marker, so that the consumer confirms its
    message again (a dead-letter replay that took its unit back first)."""
    redis().zrem(sku_keys(sku_id).done, order_id)


# --- Gives, freezes, repairs, sale data -----------------------------------------------

def give(*, sku_id: str, op_id: str, quantity: int, user_id: int | None = None,
         total_delta: int = 0, frozen_delta: int = 0) -> Give:
    return Give(int(GIVE_LUA.run(sku_keys(sku_id), op_id=op_id, quantity=quantity,
                                 user_id="" if user_id is None else user_id, total_delta=total_delta,
                                 frozen_delta=frozen_delta, lifetime_ms=_ms("SECKILL_MARKER_LIFETIME_SECONDS"))))


def freeze(*, sku_id: str, op_id: str, quantity: int) -> Freeze:
    return Freeze(int(FREEZE_LUA.run(sku_keys(sku_id), op_id=op_id, quantity=quantity,
                                     lifetime_ms=_ms("SECKILL_MARKER_LIFETIME_SECONDS"))))


def freeze_cancel(*, sku_id: str, op_id: str, quantity: int) -> FreezeCancel:
    return FreezeCancel(int(FREEZE_CANCEL_LUA.run(sku_keys(sku_id), op_id=op_id, quantity=quantity,
                                                  lifetime_ms=_ms("SECKILL_MARKER_LIFETIME_SECONDS"))))


def is_applied(*, sku_id: str, op_id: str) -> bool:
    return redis().zscore(sku_keys(sku_id).applied, op_id) is not None


def adjust_available(*, sku_id: str, repair_id: str, delta: int, whole: bool = False) -> int | None:
    """Move Redis's available by `delta`, once per `repair_id`; None when
    already applied or no snapshot. A lowering is clamped at zero, or with
    `whole` refused (Adjust.REFUSED, nothing changed) when it does not fit."""
    out = ADJUST_LUA.run(sku_keys(sku_id), repair_id=repair_id, delta=delta,
                         lifetime_ms=_ms("SECKILL_MARKER_LIFETIME_SECONDS"), whole="whole" if whole else "")
    return None if out is None else int(out)


def meta_update(*, sku_id: str, per_user_limit: int, starts_ms: int, ends_ms: int, status: str,
                version: int, unit_price: str) -> Meta:
    return Meta(int(META_LUA.run(sku_keys(sku_id), per_user_limit=per_user_limit, starts_ms=starts_ms,
                                 ends_ms=ends_ms, status=status, version=version, unit_price=unit_price)))


@dataclass(frozen=True)
class Observation:
    available: int | None  # None: no snapshot
    inflight: list[Reservation]
    applied: dict[str, bool]


def observe(*, sku_id: str, op_ids: Sequence[str]) -> Observation:
    avail, flat, flags = OBSERVE_LUA.run(sku_keys(sku_id), op_ids=op_ids)
    entries = [Reservation.from_entry(sku_id, flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
    return Observation(None if avail is None else int(avail), entries,
                       {g: bool(f) for g, f in zip(op_ids, flags)})
