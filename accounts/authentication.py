"""DRF token authentication served from Redis, so a purchase costs MySQL nothing.

The token record is written when a token or its user changes (accounts.signals) and filled lazily from MySQL after a miss (for example after
Redis lost its data). The same round trip also fetches what the request's
Idempotency-Key already made, if anything.
"""
from __future__ import annotations

from dataclasses import dataclass

from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication, get_authorization_header

from inventory import redis_store


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
    def from_blob(cls, blob: str) -> "CachedUser":
        user_id, active, staff, username = blob.split("|", 3)
        return cls(id=int(user_id), username=username, is_active=active == "1", is_staff=staff == "1")


def user_blob(user) -> str:
    return f"{user.pk}|{int(user.is_active)}|{int(user.is_staff)}|{user.get_username()}"


@dataclass
class TokenInfo:
    key: str
    # What this request's Idempotency-Key made before, if anything (any SKU).
    prior: redis_store.KeyClaim | None


class CachedTokenAuthentication(TokenAuthentication):
    keyword = "Token"

    def authenticate(self, request):
        auth = get_authorization_header(request).split()
        if not auth or auth[0].lower() != self.keyword.lower().encode():
            return None
        if len(auth) != 2:
            raise exceptions.AuthenticationFailed("Invalid token header.")
        try:
            token = auth[1].decode()
        except UnicodeError:
            raise exceptions.AuthenticationFailed("Invalid token header.") from None
        if not token or len(token) > 64:
            raise exceptions.AuthenticationFailed("Invalid token.")
        idem = request.META.get("HTTP_IDEMPOTENCY_KEY") or None
        if idem is not None and not (1 <= len(idem) <= 64):
            idem = None
        blob, prior = redis_store.token_lookup(token=token, idempotency_key=idem)
        if blob is None:
            blob = self._load_from_mysql(token)
        if blob == "-" or blob is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        user = CachedUser.from_blob(blob)
        if not user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        return user, TokenInfo(key=token, prior=prior)

    @staticmethod
    def _load_from_mysql(token: str) -> str | None:
        from rest_framework.authtoken.models import Token

        row = Token.objects.select_related("user").filter(key=token).first()
        blob = user_blob(row.user) if row is not None else None
        redis_store.token_fill(token=token, user_blob=blob)
        return blob if blob is not None else "-"

