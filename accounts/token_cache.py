"""The token cache in Redis: every key name and script of accounts.

All keys of one token share the hash tag `{<token digest>}` (one Cluster slot):
- the record, hash "u" -> "user_id|is_active|is_staff|username", or "-": the
  token is refused (a deletion being committed, or the short tombstone of one
  that committed); "w" -> when the last authoritative write (lua/token_write.lua)
  came, in Redis time. A valid token's record expires
  SECKILL_TOKEN_CACHE_SECONDS after it was last read from MySQL, so a change
  made outside the signals (a bulk update, SQL) takes effect within that time;
  a record in use is read again shortly before (lua/authorize.lua hands that to
  one request), so a busy token does not fall out of the cache. Unknown tokens
  leave no record;
- the fill lock: one refresh of the record at a time;
- the claims, hash Idempotency-Key -> KeyClaim: what each key of the token (its
  user) made, read in the same round trip as the authentication, so a retry is
  answered with its first order and another body with 422, whatever the SKU;
- the user's two budgets, token buckets spent in the authorizing round trip
  (lua/authorize.lua): purchases (`rate`) and order calls (`calls`: pay,
  cancel, list, detail), so a flood of either costs one Redis call each and
  cannot spend the other.

A fill from MySQL never overrides what is newer (lua/token_fill.lua): a read
that started before an authoritative write, or that met a deletion's "-", is
discarded, and so is one that took longer than FILL_BUDGET_MS, which the
tombstone of a committed deletion outlives.
"""
from __future__ import annotations

import enum
import hashlib
import time
import uuid
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from django.conf import settings

from core.lua_layout import CODES_IN_HEADER, DATA, Layout, many
from core.redis.calls import Call
from core.redis.connection import redis
from core.redis.instance import instance_check
from core.redis.keys import key, tagged, text
from core.redis.scripts import Scripts
from core.redis.shards import Shard, shard_of

_scripts = Scripts(Path(__file__).resolve().parent / "lua")
AUTH_FAILURE_WINDOW_SECONDS = 60
# A fill or refresh whose MySQL read began longer ago than this is discarded;
# the tombstone a committed deletion leaves outlives it.
FILL_BUDGET_MS = 5000
TOMBSTONE_MS = FILL_BUDGET_MS + 1000
# A record in use is read again from MySQL once less than this share of its
# lifetime is left.
REFRESH_SHARE = 0.2
REFUSED = "-"


# --- Each script's layout (core.lua_layout), after the enum of its outcomes ---------------------
# The keys come from the token's TokenKeys by name; a script without an enum answers data.

AUTHORIZE_LUA = Layout(_scripts, "authorize", answers=DATA, keys=("record", "claims", "budget", "fill"),
                       argv=("idempotency_key", "bucket", "every_ms", "refresh_ms", "fill_lock_ms"))


class KeyClaimed(enum.IntEnum):
    TAKEN = 0   # a live claim holds the key (it follows the code)
    OURS = 1


KEY_CLAIM_LUA = Layout(_scripts, "key_claim", answers=KeyClaimed, keys=("claims",),
                       argv=("idempotency_key", "quantity", "order_id", "sku_id", "lifetime_ms"))
KEY_FORGET_LUA = Layout(_scripts, "key_forget", answers=CODES_IN_HEADER, keys=("claims",),
                        argv=("idempotency_key", "order_id"))


class TokenWrite(enum.IntEnum):
    REFUSED = 0  # a store meeting a deletion's "-"
    WRITTEN = 1


TOKEN_WRITE_LUA = Layout(_scripts, "token_write", answers=TokenWrite, keys=("record", "claims", "rate", "calls"),
                         argv=("user_blob", "lifetime_ms", "mode"))


class TokenFill(enum.IntEnum):
    DISCARDED = 0
    WRITTEN = 1


TOKEN_FILL_LUA = Layout(_scripts, "token_fill", answers=TokenFill, keys=("record",),
                        argv=("user_blob", "since_ms", "lifetime_ms", "budget_ms"))
CLAIMS_FILL_LUA = Layout(_scripts, "claims_fill", answers=DATA, keys=("claims",),
                         argv=("lifetime_ms", many("key_claims", width=2)))
CLAIMS_FENCE_RAISE_LUA = Layout(_scripts, "claims_fence_raise", answers=DATA, keys=("fence", "passed"),
                                argv=("fence_id", "delay_ms"))


class ClaimsFencePass(enum.IntEnum):
    NOT_THIS = 0  # a copy of a passed fence, or one of an earlier loss
    PASSED = 1    # a copy passed in every partition of the confirm stream: lifted
    WAITING = 2   # this partition's copy passed; another partition's is still to pass


CLAIMS_FENCE_PASS_LUA = Layout(_scripts, "claims_fence_pass", answers=ClaimsFencePass, keys=("fence", "passed"),
                               argv=("token", "partition", "partitions"))


class Budget(enum.Enum):
    """A per-user budget a call spends from; the value names its key."""

    PURCHASES = "rate"     # POST orders (and the baseline): SECKILL_THROTTLE_RATE
    ORDER_CALLS = "calls"  # pay, cancel, list, detail: SECKILL_ORDER_CALLS_RATE


@dataclass(frozen=True)
class TokenKeys:
    record: str
    claims: str
    rate: str
    fill: str
    calls: str

    def budget(self, which: Budget) -> str:
        return self.rate if which is Budget.PURCHASES else self.calls


@lru_cache(maxsize=65536)
def token_keys(token: str) -> TokenKeys:
    # One hash tag for them all: on a Redis Cluster every key of a token is in
    # its slot, so the authorizing script may touch any of them.
    tag = f"{key('auth')}:{{{hashlib.sha256(token.encode()).hexdigest()}}}"
    return TokenKeys(record=tag, claims=f"{tag}:keys", rate=f"{tag}:rate", fill=f"{tag}:fill",
                     calls=f"{tag}:calls")


def _ms(setting: str) -> int:
    return int(getattr(settings, setting)) * 1000


@dataclass(frozen=True)
class KeyClaim:
    """What an Idempotency-Key was first used for, by this token (its user).
    Format (lua/key_claim.lua): "claimed_ms|quantity|order_id|sku_id"."""

    order_id: str
    sku_id: str
    quantity: int
    claimed_ms: int

    @classmethod
    def parse(cls, raw: str | bytes) -> KeyClaim:
        ms, qty, oid, sku = text(raw).split("|", 3)
        return cls(oid, sku, int(qty), int(ms))

    @property
    def live(self) -> bool:
        return time.time() * 1000 - self.claimed_ms < _ms("SECKILL_IDEMPOTENCY_SECONDS")


@dataclass(frozen=True)
class AuthLookup:
    user_blob: str | None  # None: Redis does not know the token
    prior: KeyClaim | None
    wait_ms: int = 0       # > 0: over the budget's rate, try again after this
    now_ms: int = 0        # Redis time of the lookup: a fill's MySQL read starts after it
    refresh: bool = False  # this request is to read the record again from MySQL (token_fill)


def authorize(*, token: str, idempotency_key: str | None, bucket: int = 0, every_ms: int = 0,
              budget: Budget = Budget.PURCHASES) -> AuthLookup:
    """The token's user and the key's claim; with `bucket` > 0, also spend one
    call from the user's `budget` (a token bucket of `bucket`, refilled one
    per `every_ms`)."""
    tk = token_keys(token)
    window = int(_ms("SECKILL_TOKEN_CACHE_SECONDS") * REFRESH_SHARE)
    # The lock is held at most half the window: a refresher that failed leaves
    # time for another before the record expires.
    blob, raw, wait, now, refresh = AUTHORIZE_LUA.run(
        tk, budget=tk.budget(budget), idempotency_key=idempotency_key or "", bucket=bucket, every_ms=every_ms or 1,
        refresh_ms=window, fill_lock_ms=max(1, min(FILL_BUDGET_MS, window // 2)))
    prior = KeyClaim.parse(raw) if raw is not None else None
    return AuthLookup(None if blob is None else text(blob), prior if prior and prior.live else None, int(wait),
                      int(now), bool(refresh))


def key_claim_call(*, token: str, idempotency_key: str, quantity: int, order_id: str, sku_id: str) -> Call:
    """Claim the key for this order (to ride in a pipeline with the reserve)."""
    return KEY_CLAIM_LUA.call(token_keys(token), idempotency_key=idempotency_key, quantity=quantity,
                              order_id=order_id, sku_id=sku_id, lifetime_ms=_ms("SECKILL_IDEMPOTENCY_SECONDS"))


def key_claim_result(raw) -> KeyClaim | None:
    """None when the claim is ours; else the live claim that holds the key."""
    return None if KeyClaimed(int(raw[0])) is KeyClaimed.OURS else KeyClaim.parse(raw[1])


def key_forget(*, token: str, idempotency_key: str, order_id: str) -> None:
    """Drop the key's claim if it still names this order."""
    KEY_FORGET_LUA.run(token_keys(token), idempotency_key=idempotency_key, order_id=order_id)


def user_claims(*, token: str) -> list[KeyClaim]:
    """The orders this token's keys made within the idempotency lifetime
    (the per-user index of orders that may still be in flight)."""
    return [c for c in (KeyClaim.parse(v) for v in redis().hvals(token_keys(token).claims)) if c.live]


def _write(token: str, blob: str, lifetime_ms: int, mode: str) -> bool:
    raw = TOKEN_WRITE_LUA.run(token_keys(token), user_blob=blob, lifetime_ms=lifetime_ms, mode=mode)
    return TokenWrite(int(raw)) is TokenWrite.WRITTEN


def token_store(*, token: str, user_blob: str) -> None:
    """Authoritative write (a token or its user changed in MySQL); a deletion
    under way is not undone by it."""
    _write(token, user_blob, _ms("SECKILL_TOKEN_CACHE_SECONDS"), "store")


def token_fill(*, token: str, user_blob: str, since_ms: int) -> bool:
    """What a request read from MySQL after the Redis time `since_ms` (a fill
    after a miss, a refresh, or REFUSED for a token MySQL no longer has);
    False when it was discarded (see the module docstring)."""
    lifetime = TOMBSTONE_MS if user_blob == REFUSED else _ms("SECKILL_TOKEN_CACHE_SECONDS")
    raw = TOKEN_FILL_LUA.run(token_keys(token), user_blob=user_blob, since_ms=since_ms, lifetime_ms=lifetime,
                             budget_ms=FILL_BUDGET_MS)
    return TokenFill(int(raw)) is TokenFill.WRITTEN


def token_revoking(*, token: str) -> None:
    """A deletion is under way: refuse the token now, for a few seconds (if the
    deletion rolls back, the record expires and is filled from MySQL again)."""
    _write(token, REFUSED, _ms("SECKILL_TOKEN_REVOKING_SECONDS"), "refuse")


def token_forget(*, token: str) -> None:
    """The token is gone from MySQL: its claims and budgets go, and its record
    stays a refusal just long enough that no fill which read MySQL before the
    deletion committed can bring it back."""
    _write(token, REFUSED, TOMBSTONE_MS, "forget")


def _failure_key(client: str) -> str:
    return f"{key('authfail')}:{{{client}}}"


def auth_failures(*, client: str) -> int:
    return int(redis().get(_failure_key(client)) or 0)


def auth_failure_count(*, client: str) -> int:
    """One more failed authentication from this client address (per minute)."""
    name = _failure_key(client)
    pipe = redis().pipeline(transaction=True)
    pipe.incr(name)
    pipe.expire(name, AUTH_FAILURE_WINDOW_SECONDS, nx=True)
    return int(pipe.execute()[0])


# --- A shard's claims lost: the claims fence -------------------------------------------------
# The claims live with their token on one shard. A new instance (a restart, a
# promoted replica) or a wipe takes them, while the reservations they named
# may still be in the broker: MySQL cannot answer for them yet. So the check of
# the new instance (core.redis.instance.instance_check) drops every token key
# the shard held and raises the shard's claims fence; a token whose record must then be
# filled waits (503) until the fence's message came out of the confirm queue,
# and its fill reads the claims its user's orders made from MySQL, once.

def claims_fence_key(tag: str) -> str:
    """The claims fence of the shard whose hash tag is `tag` ("": the one Redis)."""
    return key("claims-fence") if not tag else f"{tagged(tag)}:claims-fence"


def claims_fence_passed_key(fence_key: str) -> str:
    """The partitions of the confirm stream a copy of the fence passed in (same slot)."""
    return f"{fence_key}:passed"


def tokens_distrust(*, shard: Shard, delay_ms: int) -> str:
    """Raise the shard's claims fence, then drop every token key it holds.
    Returns the fence's token, for the caller to list and send the fence."""
    fence = claims_fence_key(shard.tag)
    token = text(CLAIMS_FENCE_RAISE_LUA.run(fence=fence, passed=claims_fence_passed_key(fence),
                                            fence_id=uuid.uuid4().hex, delay_ms=delay_ms))
    shard.unlink_matching(f"{key('auth')}:{{*")
    return token


def claims_fence_pass(*, shard_tag: str, token: str, partition: int = 0, partitions: int = 1) -> ClaimsFencePass:
    """A copy of the claims fence of the shard tagged `shard_tag` came out of
    `partition` of the confirm stream (of `partitions`): the fence is lifted
    once a copy passed in every one, since the lost claims named reservations
    of any SKU, in any partition."""
    fence = claims_fence_key(shard_tag)
    raw = CLAIMS_FENCE_PASS_LUA.run(fence=fence, passed=claims_fence_passed_key(fence), token=token,
                                    partition=partition, partitions=partitions)
    return ClaimsFencePass(int(raw))


def claims_trusted(*, token: str) -> bool:
    """May this token's record be filled now? Not while its shard's claims
    fence stands. A shard whose instance key is gone was wiped (FLUSHALL):
    it is checked first, which raises the fence."""
    shard = shard_of(redis(), token_keys(token).record)
    pipe = shard.client.pipeline(transaction=False)
    pipe.get(shard.key("instance"))
    pipe.exists(claims_fence_key(shard.tag))
    instance, fenced = pipe.execute()
    if instance is None:
        instance_check(shard, recorded_only=True)
        fenced = shard.client.exists(claims_fence_key(shard.tag))
    return not fenced


def claims_fill(*, token: str, claims: list[KeyClaim], keys: list[str]) -> int:
    """Add what MySQL says these keys made (claims Redis holds stay)."""
    if not claims:
        return 0
    flat = [x for k, c in zip(keys, claims) for x in (k, f"{c.claimed_ms}|{c.quantity}|{c.order_id}|{c.sku_id}")]
    return int(CLAIMS_FILL_LUA.run(token_keys(token), lifetime_ms=_ms("SECKILL_IDEMPOTENCY_SECONDS"),
                                   key_claims=flat))
