"""The token cache in Redis: every key name and script of accounts.

All keys of one token share the hash tag `{<token digest>}` (one Cluster slot):
- the record, hash "u" -> "user_id|is_active|is_staff|username" ("-" while a
  deletion is being committed); a valid token's record expires after
  SECKILL_TOKEN_CACHE_SECONDS, so a change made outside the signals (a bulk
  update, SQL) takes effect within that time; unknown tokens leave no record;
- the claims, hash Idempotency-Key -> KeyClaim: what each key of the token (its
  user) made, read in the same round trip as the authentication, so a retry is
  answered with its first order and another body with 422, whatever the SKU;
- the purchase token bucket (lua/authorize.lua).
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from django.conf import settings

from core.redis import Call, Scripts, redis, text

_scripts = Scripts(Path(__file__).resolve().parent / "lua")
AUTH_FAILURE_WINDOW_SECONDS = 60


@dataclass(frozen=True)
class TokenKeys:
    record: str
    claims: str
    rate: str


@lru_cache(maxsize=65536)
def token_keys(token: str) -> TokenKeys:
    tag = f"seckill:auth:{{{hashlib.sha256(token.encode()).hexdigest()}}}"
    return TokenKeys(record=tag, claims=f"{tag}:keys", rate=f"{tag}:rate")


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
    def parse(cls, raw: str | bytes) -> "KeyClaim":
        ms, qty, oid, sku = text(raw).split("|", 3)
        return cls(oid, sku, int(qty), int(ms))

    @property
    def live(self) -> bool:
        return time.time() * 1000 - self.claimed_ms < _ms("SECKILL_IDEMPOTENCY_SECONDS")


@dataclass(frozen=True)
class AuthLookup:
    user_blob: str | None  # None: Redis does not know the token
    prior: KeyClaim | None
    wait_ms: int = 0       # > 0: over the purchase rate, try again after this


def authorize(*, token: str, idempotency_key: str | None, bucket: int = 0, every_ms: int = 0) -> AuthLookup:
    """The token's user and the key's claim; with `bucket` > 0, also spend one
    purchase from the user's token bucket (refilled one per `every_ms`)."""
    tk = token_keys(token)
    blob, raw, wait = _scripts.get("authorize")(keys=[tk.record, tk.claims, tk.rate],
                                                args=[idempotency_key or "", bucket, every_ms or 1])
    prior = KeyClaim.parse(raw) if raw is not None else None
    return AuthLookup(None if blob is None else text(blob), prior if prior and prior.live else None, int(wait))


def key_claim_call(*, token: str, idempotency_key: str, quantity: int, order_id: str, sku_id: str) -> Call:
    """Claim the key for this order (to ride in a pipeline with the reserve)."""
    return Call(_scripts.get("key_claim"), [token_keys(token).claims],
                [idempotency_key, quantity, order_id, sku_id, _ms("SECKILL_IDEMPOTENCY_SECONDS")])


def key_claim_result(raw) -> KeyClaim | None:
    """None when the claim is ours; else the live claim that holds the key."""
    return None if int(raw[0]) == 1 else KeyClaim.parse(raw[1])


def key_forget(*, token: str, idempotency_key: str, order_id: str) -> None:
    """Drop the key's claim if it still names this order."""
    _scripts.get("key_forget")(keys=[token_keys(token).claims], args=[idempotency_key, order_id])


def user_claims(*, token: str) -> list[KeyClaim]:
    """The orders this token's keys made within the idempotency lifetime
    (the per-user index of orders that may still be in flight)."""
    return [c for c in (KeyClaim.parse(v) for v in redis().hvals(token_keys(token).claims)) if c.live]


def token_store(*, token: str, user_blob: str) -> None:
    """Authoritative write (a token or its user changed in MySQL)."""
    pipe = redis().pipeline(transaction=True)
    pipe.hset(token_keys(token).record, "u", user_blob)
    pipe.expire(token_keys(token).record, settings.SECKILL_TOKEN_CACHE_SECONDS)
    pipe.execute()


def token_fill(*, token: str, user_blob: str) -> None:
    """Lazy fill after a cache miss; never overrides an authoritative write."""
    key = token_keys(token).record
    r = redis()
    if r.hsetnx(key, "u", user_blob):
        r.expire(key, settings.SECKILL_TOKEN_CACHE_SECONDS)


def token_revoking(*, token: str) -> None:
    """A deletion is under way: refuse the token now, for a few seconds (if the
    deletion rolls back, the record expires and is filled from MySQL again)."""
    pipe = redis().pipeline(transaction=True)
    pipe.hset(token_keys(token).record, "u", "-")
    pipe.expire(token_keys(token).record, settings.SECKILL_TOKEN_REVOKING_SECONDS)
    pipe.execute()


def token_forget(*, token: str) -> None:
    """The token is gone from MySQL: nothing of it stays in Redis."""
    tk = token_keys(token)
    redis().delete(tk.record, tk.claims, tk.rate)


def auth_failures(*, client: str) -> int:
    return int(redis().get(f"seckill:authfail:{{{client}}}") or 0)


def auth_failure_count(*, client: str) -> int:
    """One more failed authentication from this client address (per minute)."""
    key = f"seckill:authfail:{{{client}}}"
    pipe = redis().pipeline(transaction=True)
    pipe.incr(key)
    pipe.expire(key, AUTH_FAILURE_WINDOW_SECONDS, nx=True)
    return int(pipe.execute()[0])
