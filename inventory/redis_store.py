"""The Redis gate: every key name and every Lua call of the project lives here.

All keys of one SKU share the hash tag `{<sku>}`, so each script touches a
single Cluster slot. The connection comes from django-redis; no ORM here.
"""
from __future__ import annotations

import hashlib
import time
import uuid
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from django_redis import get_redis_connection
from redis import Redis
from redis.exceptions import NoScriptError, RedisError  # noqa: F401  (RedisError re-exported)
from redis.commands.core import Script

LUA_DIR = Path(__file__).resolve().parent / "lua"

# reserve.lua return codes
OK, DUPLICATE, KEY_REUSED, SOLD_OUT, LIMIT_REACHED, NOT_ACTIVE, NOT_WARMED, UNKNOWN_SKU = range(8)
# release.lua return codes
RELEASE_NOTHING, RELEASE_DONE, RELEASE_CLAIMED = 0, 1, 2

MISSING_SKU_TTL_SECONDS = 30
WARM_LOCK_MS = 5000


def redis() -> Redis:
    return get_redis_connection("default")


@dataclass(frozen=True)
class SkuKeys:
    stock: str
    buyers: str
    inflight: str
    idem: str
    queue: str
    missing: str
    claims: str
    done: str
    released: str
    applied: str
    lock: str


@lru_cache(maxsize=4096)
def sku_keys(sku_id: str) -> SkuKeys:
    tag = f"seckill:{{{sku_id}}}"
    return SkuKeys(
        stock=f"{tag}:stock",
        buyers=f"{tag}:buyers",
        inflight=f"{tag}:inflight",
        idem=f"{tag}:idem",
        queue=f"{tag}:queue",
        missing=f"{tag}:missing",
        claims=f"{tag}:claims",
        done=f"{tag}:done",
        released=f"{tag}:released",
        applied=f"{tag}:applied",
        lock=f"{tag}:warm-lock",
    )


def token_key(token: str) -> str:
    return "seckill:auth:" + hashlib.sha256(token.encode()).hexdigest()


@lru_cache(maxsize=None)
def _script(name: str) -> Script:
    # Script objects call EVALSHA and load the source once on NOSCRIPT; `.sha`
    # is known without a round trip, so the hot path can pipeline EVALSHA.
    return redis().register_script((LUA_DIR / f"{name}.lua").read_text())


# --- Reservations ---------------------------------------------------------

@dataclass(frozen=True)
class ReserveResult:
    code: int
    order_id: str = ""
    value: int = 0
    limit: int = 0


def reserve(*, sku_id: str, user_id: int, quantity: int, idempotency_key: str, order_id: str,
            remember: tuple[str, str] | None = None) -> ReserveResult:
    """Run reserve.lua. `remember` = (token, pointer): also mark the key as used
    in the token's record, in the same round trip (a pipeline, not a script:
    the token record lives in another slot)."""
    k = sku_keys(sku_id)
    keys = [k.stock, k.buyers, k.inflight, k.idem, k.queue, k.missing]
    args = [user_id, quantity, idempotency_key, order_id]
    script = _script("reserve")
    r = redis()
    try:
        if remember is None:
            raw = r.evalsha(script.sha, len(keys), *keys, *args)
        else:
            pipe = r.pipeline(transaction=False)
            pipe.hset(token_key(remember[0]), "i:" + idempotency_key, remember[1])
            pipe.evalsha(script.sha, len(keys), *keys, *args)
            raw = pipe.execute()[1]
    except NoScriptError:
        # Redis restarted or was flushed of scripts: load once, then call again.
        raw = script(keys=keys, args=args)
    code = int(raw[0])
    if code in (OK, DUPLICATE):
        return ReserveResult(code, _s(raw[1]), int(raw[2]))
    if code == KEY_REUSED:
        return ReserveResult(code, _s(raw[1]))
    if code == SOLD_OUT:
        return ReserveResult(code, value=int(raw[1]))
    if code == LIMIT_REACHED:
        return ReserveResult(code, value=int(raw[1]), limit=int(raw[2]))
    return ReserveResult(code)


def release(*, sku_id: str, order_id: str) -> int:
    k = sku_keys(sku_id)
    return int(_script("release")(keys=[k.stock, k.buyers, k.inflight, k.idem, k.claims, k.released], args=[order_id]))


@dataclass(frozen=True)
class InFlight:
    order_id: str
    user_id: int
    quantity: int
    reserved_ms: int
    version: int
    idempotency_key: str


def parse_inflight(order_id: str, entry: str | bytes) -> InFlight:
    user, qty, ts, version, key = _s(entry).split("|", 4)
    return InFlight(order_id, int(user), int(qty), int(ts), int(version), key)


def claim(*, sku_id: str, order_ids: list[str], batch: int) -> tuple[dict[str, str], list[InFlight]]:
    """Claim the message's reservations and up to `batch` others. Returns the
    state of each own id and every claimed in-flight entry."""
    k = sku_keys(sku_id)
    raw = _script("claim")(keys=[k.inflight, k.queue, k.claims, k.done, k.released], args=[batch, *order_ids])
    n = int(raw[0])
    states = {oid: _s(raw[1 + i]) for i, oid in enumerate(order_ids)}
    assert len(states) == n
    items = [parse_inflight(_s(raw[i]), raw[i + 1]) for i in range(1 + n, len(raw), 2)]
    return states, items


def settle(*, sku_id: str, confirmed: list[str], failed: list[str], given_back: list[str] = ()) -> int:
    if not confirmed and not failed and not given_back:
        return 0
    k = sku_keys(sku_id)
    return int(
        _script("settle")(
            keys=[k.stock, k.buyers, k.inflight, k.claims, k.done],
            args=[len(confirmed), len(failed), *confirmed, *failed, *given_back],
        )
    )


GIVE_APPLIED, GIVE_ALREADY, GIVE_NOT_WARM = 1, 0, -1


def give(*, sku_id: str, op_id: str, quantity: int, user_id: int | None = None,
         total_delta: int = 0, frozen_delta: int = 0) -> int:
    k = sku_keys(sku_id)
    return int(_script("give")(keys=[k.stock, k.buyers, k.applied],
                               args=[op_id, quantity, "" if user_id is None else user_id,
                                     total_delta, frozen_delta]))


FREEZE_TAKEN, FREEZE_REFUSED, FREEZE_ALREADY, FREEZE_NOT_WARM = 1, 0, 2, -1


def freeze(*, sku_id: str, op_id: str, quantity: int) -> int:
    k = sku_keys(sku_id)
    return int(_script("freeze")(keys=[k.stock, k.applied], args=[op_id, quantity]))


def snapshot_drop_if_idle(*, sku_id: str) -> bool:
    k = sku_keys(sku_id)
    return bool(_script("rebuild")(keys=[k.stock, k.inflight, k.buyers, k.idem, k.applied], args=[]))


@dataclass(frozen=True)
class Observation:
    available: int | None  # None: no snapshot
    inflight: list[InFlight]
    applied: dict[str, bool]


def observe(*, sku_id: str, give_ids: list[str]) -> Observation:
    k = sku_keys(sku_id)
    avail, flat, flags = _script("observe")(keys=[k.stock, k.inflight, k.applied], args=give_ids)
    entries = [parse_inflight(_s(flat[i]), flat[i + 1]) for i in range(0, len(flat), 2)]
    return Observation(None if avail is None else int(avail), entries,
                       {g: bool(f) for g, f in zip(give_ids, flags)})


def adjust_available(*, sku_id: str, repair_id: str, delta: int) -> int | None:
    k = sku_keys(sku_id)
    out = _script("adjust")(keys=[k.stock, k.applied], args=[repair_id, delta])
    return None if out is None else int(out)


def meta_update(*, sku_id: str, per_user_limit: int, starts_ms: int, ends_ms: int, status: str,
                version: int) -> bool:
    return bool(_script("meta")(keys=[sku_keys(sku_id).stock],
                                args=[per_user_limit, starts_ms, ends_ms, status, version]))


def inflight_entries(*, sku_id: str) -> list[InFlight]:
    raw = redis().hgetall(sku_keys(sku_id).inflight)
    return [parse_inflight(_s(oid), e) for oid, e in raw.items()]


def is_settled(*, sku_id: str, order_id: str) -> bool:
    return bool(redis().sismember(sku_keys(sku_id).done, order_id))


# --- Snapshots --------------------------------------------------------------

@dataclass(frozen=True)
class Snapshot:
    available: int
    total: int
    frozen: int
    version: int
    per_user_limit: int
    starts_ms: int
    ends_ms: int
    status: str
    buyers: dict[int, int]
    idempotency: dict[str, str]
    applied_gives: tuple[str, ...] = ()


def snapshot_exists(*, sku_id: str) -> bool:
    return bool(redis().exists(sku_keys(sku_id).stock))


def snapshot_load(*, sku_id: str, snapshot: Snapshot) -> bool:
    """Write the snapshot unless one is there already. Returns True if loaded."""
    k = sku_keys(sku_id)
    args: list[object] = [
        snapshot.available, snapshot.total, snapshot.frozen, 0, snapshot.version,
        snapshot.per_user_limit, snapshot.starts_ms, snapshot.ends_ms, snapshot.status,
        len(snapshot.buyers),
    ]
    for user_id, units in snapshot.buyers.items():
        args += [user_id, units]
    args.append(len(snapshot.idempotency))
    for field, value in snapshot.idempotency.items():
        args += [field, value]
    args += list(snapshot.applied_gives)
    return bool(_script("warm")(keys=[k.stock, k.buyers, k.idem, k.missing, k.applied], args=args))


def warm_lock_acquire(*, sku_id: str) -> str | None:
    token = uuid.uuid4().hex
    if redis().set(sku_keys(sku_id).lock, token, nx=True, px=WARM_LOCK_MS):
        return token
    return None


def warm_lock_release(*, sku_id: str, token: str) -> None:
    lock = sku_keys(sku_id).lock
    r = redis()
    # Compare-and-delete; a plain DEL could drop another process's lock.
    r.eval("if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
           1, lock, token)


def wait_for_snapshot(*, sku_id: str, timeout_s: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if snapshot_exists(sku_id=sku_id):
            return True
        time.sleep(0.02)
    return False


def mark_missing(*, sku_id: str) -> None:
    redis().set(sku_keys(sku_id).missing, 1, ex=MISSING_SKU_TTL_SECONDS)


def clear_missing(*, sku_id: str) -> None:
    redis().delete(sku_keys(sku_id).missing)


@dataclass(frozen=True)
class LiveStock:
    available: int
    total: int
    frozen: int
    inflight: int
    version: int


def live_stock(*, sku_id: str) -> LiveStock | None:
    vals = redis().hmget(sku_keys(sku_id).stock, "available", "total", "frozen", "inflight", "version")
    if vals[0] is None:
        return None
    return LiveStock(*(int(v or 0) for v in vals))


def live_stock_many(*, sku_ids: list[str]) -> dict[str, LiveStock | None]:
    pipe = redis().pipeline(transaction=False)
    for sku_id in sku_ids:
        pipe.hmget(sku_keys(sku_id).stock, "available", "total", "frozen", "inflight", "version")
    out: dict[str, LiveStock | None] = {}
    for sku_id, vals in zip(sku_ids, pipe.execute()):
        out[sku_id] = None if vals[0] is None else LiveStock(*(int(v or 0) for v in vals))
    return out


def inflight_of_user(*, sku_ids: list[str], user_id: int) -> list[tuple[str, InFlight]]:
    """The user's reservations still in flight, across SKUs (one round trip)."""
    if not sku_ids:
        return []
    pipe = redis().pipeline(transaction=False)
    for sku_id in sku_ids:
        pipe.hgetall(sku_keys(sku_id).inflight)
    out = []
    prefix = f"{user_id}|".encode()
    for sku_id, entries in zip(sku_ids, pipe.execute()):
        for oid, entry in entries.items():
            if entry.startswith(prefix):
                out.append((sku_id, parse_inflight(_s(oid), entry)))
    return out


def find_inflight(*, sku_ids: list[str], order_id: str) -> tuple[str, InFlight] | None:
    """Which SKU holds this reservation in flight, if any (one round trip)."""
    pipe = redis().pipeline(transaction=False)
    for sku_id in sku_ids:
        pipe.hget(sku_keys(sku_id).inflight, order_id)
    for sku_id, entry in zip(sku_ids, pipe.execute()):
        if entry is not None:
            return sku_id, parse_inflight(order_id, entry)
    return None


# --- Cached token authentication -------------------------------------------
# One hash per token: field "u" holds "user_id|is_active|is_staff|username" (or
# "-" for a token MySQL does not know); field "i:<idempotency key>" holds
# "<sku_id>|<quantity>" of the request that used the key, read in the same round
# trip as the authentication. It only tells that a key was used (a retry must
# get its first answer from the gate, never a shortcut "sold out") and with
# which body (another body answers 422 at once).

TOKEN_NEGATIVE_TTL_SECONDS = 60


def token_lookup(*, token: str, idempotency_key: str | None) -> tuple[str | None, str | None]:
    fields = ["u", "i:" + idempotency_key] if idempotency_key else ["u"]
    vals = redis().hmget(token_key(token), fields)
    user = _s(vals[0]) if vals[0] is not None else None
    pointer = _s(vals[1]) if len(vals) > 1 and vals[1] is not None else None
    return user, pointer


def token_store(*, token: str, user_blob: str) -> None:
    """Authoritative write (a token or its user changed in MySQL)."""
    r = redis()
    key = token_key(token)
    pipe = r.pipeline(transaction=True)
    pipe.hset(key, "u", user_blob)
    pipe.persist(key)
    pipe.execute()


def token_fill(*, token: str, user_blob: str | None) -> None:
    """Lazy fill after a cache miss; never overrides an authoritative write."""
    key = token_key(token)
    r = redis()
    if user_blob is None:
        if r.hsetnx(key, "u", "-"):
            r.expire(key, TOKEN_NEGATIVE_TTL_SECONDS)
    else:
        r.hsetnx(key, "u", user_blob)


def token_revoke(*, token: str) -> None:
    r = redis()
    key = token_key(token)
    pipe = r.pipeline(transaction=True)
    pipe.delete(key)
    pipe.hset(key, "u", "-")
    pipe.expire(key, TOKEN_NEGATIVE_TTL_SECONDS * 60)
    pipe.execute()


def token_forget_key(*, token: str, idempotency_key: str) -> None:
    redis().hdel(token_key(token), "i:" + idempotency_key)


def ping() -> bool:
    return bool(redis().ping())


def _s(v: str | bytes) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
