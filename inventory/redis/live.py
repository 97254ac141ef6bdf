"""Figures of the live sale view and the admin, read from Redis: each SKU's
live stock and the reservations in flight (with the oldest one's age)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.redis.connection import redis
from inventory.domain import Reservation
from inventory.redis.keys import sku_keys


@dataclass(frozen=True)
class LiveStock:
    available: int
    total: int
    frozen: int
    inflight: int
    version: int


_LIVE_FIELDS = ("available", "total", "frozen", "inflight", "version")


def live_stock(*, sku_id: str) -> LiveStock | None:
    vals = redis().hmget(sku_keys(sku_id).stock, *_LIVE_FIELDS)
    return None if vals[0] is None else LiveStock(*(int(v or 0) for v in vals))


def live_stock_many(*, sku_ids: Sequence[str]) -> dict[str, LiveStock | None]:
    pipe = redis().pipeline(transaction=False)
    for sku_id in sku_ids:
        pipe.hmget(sku_keys(sku_id).stock, *_LIVE_FIELDS)
    return {sku_id: None if vals[0] is None else LiveStock(*(int(v or 0) for v in vals))
            for sku_id, vals in zip(sku_ids, pipe.execute())}


@dataclass(frozen=True)
class InflightFigures:
    reservations: int
    oldest_ms: int | None  # when the oldest reservation still in flight was accepted
    exact: bool


def inflight_figures(*, sku_ids: Sequence[str], exact_upto: int, candidates: int
                     ) -> tuple[dict[str, LiveStock | None], dict[str, InflightFigures], int]:
    """Each SKU's live stock, reservations in flight and the oldest one, and
    Redis's clock (ms), in two pipelined round trips (the live sale view). The
    oldest is exact up to `exact_upto` in flight; beyond, it is read from the
    `candidates` earliest orphan deadlines (a lower bound of the age)."""
    r = redis()
    pipe = r.pipeline(transaction=False)
    pipe.time()
    for sku_id in sku_ids:
        k = sku_keys(sku_id)
        pipe.hmget(k.stock, *_LIVE_FIELDS)
        pipe.hlen(k.inflight)
        pipe.zrange(k.due, 0, candidates - 1)
    raw = pipe.execute()
    secs, micros = raw[0]
    now_ms = int(secs) * 1000 + int(micros) // 1000
    live: dict[str, LiveStock | None] = {}
    counts: dict[str, int] = {}
    due_ids: dict[str, list] = {}
    for i, sku_id in enumerate(sku_ids):
        vals, n, due = raw[1 + 3 * i: 4 + 3 * i]
        live[sku_id] = None if vals[0] is None else LiveStock(*(int(v or 0) for v in vals))
        counts[sku_id] = int(n)
        due_ids[sku_id] = list(due)
    busy = [s for s in sku_ids if counts[s]]
    figures = {s: InflightFigures(0, None, True) for s in sku_ids}
    if busy:
        pipe = r.pipeline(transaction=False)
        for sku_id in busy:
            k = sku_keys(sku_id)
            if counts[sku_id] <= exact_upto:
                pipe.hgetall(k.inflight)
            else:
                pipe.hmget(k.inflight, due_ids[sku_id] or ["-"])
        for sku_id, got in zip(busy, pipe.execute()):
            exact = counts[sku_id] <= exact_upto
            pairs = got.items() if exact else zip(due_ids[sku_id], got)
            times = [Reservation.from_entry(sku_id, oid, e).reserved_ms for oid, e in pairs if e]
            figures[sku_id] = InflightFigures(counts[sku_id], min(times) if times else None, exact)
    return live, figures, now_ms
