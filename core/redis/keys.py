"""The project's key names and the text of a reply. No I/O.

Every key starts with SECKILL_REDIS_PREFIX (`key()`); keys that must share a
Cluster slot share a hash tag (`tagged()`). Each app builds its own key names
from these, in one module of its own (inventory.redis.keys, accounts.token_cache).
"""
from __future__ import annotations

from django.conf import settings


def prefix() -> str:
    return settings.SECKILL_REDIS_PREFIX


def key(*parts: str) -> str:
    """A key of the project's: the prefix, then the parts, joined by ':'."""
    return ":".join((prefix(), *parts))


def tagged(tag: str) -> str:
    """The head of the keys that share the hash tag `tag` (one Cluster slot)."""
    return f"{prefix()}:{{{tag}}}"


def text(v: str | bytes) -> str:
    """A reply (or a key name read back) as text."""
    return v.decode() if isinstance(v, bytes) else str(v)
