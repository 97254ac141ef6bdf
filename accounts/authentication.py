"""DRF token authentication served from Redis, so a purchase costs MySQL nothing.

The token record is written when a token or its user changes (accounts.signals)
and filled from MySQL after a miss (for example after Redis lost its data, or
after the record's lifetime). The same round trip also fetches what the
request's Idempotency-Key already made, and spends from one of the user's
budgets for the calls that name it: purchases (SECKILL_THROTTLE_RATE) or
order calls (SECKILL_ORDER_CALLS_RATE: pay, cancel, list, detail), so no call
that reads a body or MySQL can be sent in bulk by one user.

Only a token Redis does not hold meets the unknown-token limit, counted per
client address (core.client): a record in use is read again from MySQL before
it expires, without that limit (the token is known), so a flood of made-up
tokens refuses nobody's cached token, and with SECKILL_TRUSTED_PROXIES set
nobody's token from another address. A valid token that is not cached and comes
from an address over the limit is refused (429) for up to a minute: without
asking MySQL it cannot be told from the flood that address sent.
"""
from __future__ import annotations

import hmac
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from ipaddress import ip_network

from django.conf import settings
from django.db import DatabaseError
from redis.exceptions import RedisError
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

from accounts import token_cache
from accounts.token_cache import Budget
from core.client import client_address
from core.errors import Unavailable

logger = logging.getLogger(__name__)


@dataclass
class CachedUser:
    """The part of a user the API needs, without loading the row."""

    id: int
    username: str
    is_active: bool
    is_staff: bool
    is_authenticated: bool = True
    is_anonymous: bool = False

    @property
    def pk(self) -> int:
        return self.id

    @classmethod
    def from_blob(cls, blob: str) -> CachedUser:
        user_id, active, staff, username = blob.split("|", 3)
        return cls(id=int(user_id), username=username, is_active=active == "1", is_staff=staff == "1")


def user_blob(user) -> str:
    return f"{user.pk}|{int(user.is_active)}|{int(user.is_staff)}|{user.get_username()}"


@dataclass
class TokenInfo:
    key: str
    # What this request's Idempotency-Key made before, if anything (any SKU).
    prior: token_cache.KeyClaim | None


class Throttled(exceptions.Throttled):
    default_detail = "Too many requests."


# The rate each budget is spent at (settings parsed as (bucket, ms per request)).
_RATES = {Budget.PURCHASES: "SECKILL_THROTTLE", Budget.ORDER_CALLS: "SECKILL_ORDER_CALLS"}


def authenticate_request(meta: dict, *, budget: Budget | None) -> tuple[CachedUser, TokenInfo] | None:
    """The token of a request's headers (WSGI `META`): its user and what its
    Idempotency-Key made, in one Redis round trip that also spends one call
    from the user's `budget` (none: nothing spent). None without an
    Authorization header of this scheme. Raises AuthenticationFailed or Throttled."""
    auth = get_authorization_header_of(meta).split()
    if not auth or auth[0].lower() != b"token":
        return None
    if len(auth) != 2:
        raise exceptions.AuthenticationFailed("Invalid token header.")
    try:
        token = auth[1].decode()
    except UnicodeError:
        raise exceptions.AuthenticationFailed("Invalid token header.") from None
    if not token or len(token) > 64 or not token.isascii():
        raise exceptions.AuthenticationFailed("Invalid token.")
    idem = meta.get("HTTP_IDEMPOTENCY_KEY") or None
    if idem is not None and not (1 <= len(idem) <= 64):
        idem = None
    bucket, every_ms = getattr(settings, _RATES[budget]) if budget is not None else (0, 0)
    spend = {"bucket": bucket, "every_ms": every_ms, "budget": budget or Budget.PURCHASES}
    found = token_cache.authorize(token=token, idempotency_key=idem, **spend)
    if found.user_blob is None:
        uncached = _fill_from_mysql(token, meta, since_ms=found.now_ms, purchase=budget is Budget.PURCHASES)
        if uncached is not None:  # the token's shard lost its claims and their fence stands
            found = replace(found, user_blob=uncached)
        else:
            found = token_cache.authorize(token=token, idempotency_key=idem, **spend)
            if found.user_blob is None:  # the fill took too long to be trusted (token_cache.FILL_BUDGET_MS)
                raise Unavailable()
    elif found.refresh:
        found = _refreshed(token, found)
    if found.user_blob in (None, token_cache.REFUSED):
        raise exceptions.AuthenticationFailed("Invalid token.")
    user = CachedUser.from_blob(found.user_blob)
    if not user.is_active:
        raise exceptions.AuthenticationFailed("User inactive or deleted.")
    if found.wait_ms:
        raise Throttled(wait=max(1, math.ceil(found.wait_ms / 1000)))
    return user, TokenInfo(key=token, prior=found.prior)


def get_authorization_header_of(meta: dict) -> bytes:
    header = meta.get("HTTP_AUTHORIZATION", b"")
    return header.encode("iso-8859-1") if isinstance(header, str) else header


def _token_row(token: str):
    """The token's row with its user, or None. The column compares bytes
    (accounts/migrations/0001), and so does this: a case variant is not the token."""
    from rest_framework.authtoken.models import Token

    row = Token.objects.select_related("user").filter(key=token).first()
    if row is None or not hmac.compare_digest(row.key.encode(), token.encode()):
        return None
    return row


def _failure_source(address: str) -> str:
    """What the unknown-token limit counts: the client address, or for IPv6
    its /64 (one subscriber's network, whose addresses it may rotate freely)."""
    if ":" not in address:
        return address
    try:
        return str(ip_network(f"{address}/64", strict=False))
    except ValueError:
        return address


# What the user's Idempotency-Keys made, read from MySQL (orders registers it:
# accounts cannot import it): user id -> [(key, KeyClaim)] within the keys' lifetime.
_claims_source: list[Callable[[int], list[tuple[str, token_cache.KeyClaim]]]] = []


def claims_source_register(source: Callable[[int], list[tuple[str, token_cache.KeyClaim]]]) -> None:
    _claims_source[:] = [source]


def _fill_from_mysql(token: str, meta: dict, *, since_ms: int, purchase: bool = False) -> str | None:
    """A token Redis does not hold. Unknown tokens write nothing per token;
    their client's address is counted, and past its limit is refused before
    MySQL is asked.

    The record goes with the claims of the token's keys: when its shard lost
    them (token_cache.claims_trusted), a purchase waits (503) until every
    reservation made before the loss is in MySQL; any other request is
    answered from MySQL without caching the record (returned). Otherwise the
    claims the user's orders made are read from MySQL once, with the record."""
    limit = settings.SECKILL_AUTH_FAILURES_PER_MINUTE
    source = _failure_source(client_address(meta))
    if limit and token_cache.auth_failures(client=source) >= limit:
        raise Throttled(wait=token_cache.AUTH_FAILURE_WINDOW_SECONDS,
                        detail="Too many failed authentications from this address.")
    row = _token_row(token)
    if row is None:
        if token_cache.auth_failure_count(client=source) == limit:
            logger.warning("unknown tokens from %s reached the limit of %d a minute", source, limit)
        raise exceptions.AuthenticationFailed("Invalid token.")
    if not token_cache.claims_trusted(token=token):
        if purchase:
            raise Unavailable()
        return user_blob(row.user)
    if _claims_source:
        made = _claims_source[0](row.user_id)
        token_cache.claims_fill(token=token, claims=[c for _, c in made], keys=[k for k, _ in made])
    token_cache.token_fill(token=token, user_blob=user_blob(row.user), since_ms=since_ms)
    return None


def _refreshed(token: str, found: token_cache.AuthLookup) -> token_cache.AuthLookup:
    """The record is close to its expiry and this request holds its fill lock:
    read the user again, so the record lives on while a change made outside the
    signals still shows within its lifetime. The token was known, so this is no
    failed authentication; if a store fails, the cached record still stands."""
    try:
        row = _token_row(token)
        blob = token_cache.REFUSED if row is None else user_blob(row.user)
        token_cache.token_fill(token=token, user_blob=blob, since_ms=found.now_ms)
    except (DatabaseError, RedisError) as exc:
        logger.warning("token record not refreshed (it expires as planned): %r", exc)
        return found
    return replace(found, user_blob=blob)


class CachedTokenAuthentication(TokenAuthentication):
    """DRF's view of `authenticate_request`: a view that names a `budget`
    (accounts.token_cache.Budget) spends from it on every call."""

    keyword = "Token"

    def authenticate(self, request):
        view = (request.parser_context or {}).get("view")
        return authenticate_request(request.META, budget=getattr(view, "budget", None))
