"""HMAC signatures for message bodies: a consumer refuses a body it did not sign.

The key comes from the environment (SECKILL_TASK_SIGNING_KEY), so a message
forged on a shared broker changes nothing.
"""
from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from django.conf import settings


class BadSignature(Exception):
    """A message whose signature does not match: never executed."""


def _key() -> bytes:
    return settings.SECKILL_TASK_SIGNING_KEY.encode()


def sign_bytes(body: bytes) -> str:
    return hmac.new(_key(), body, hashlib.sha256).hexdigest()


def verify_bytes(body: bytes, signature: Any) -> bytes:
    if not isinstance(signature, (str, bytes)):
        raise BadSignature("unsigned message")
    # Bytes on both sides: compare_digest refuses a str holding anything but
    # ASCII with TypeError, and the signature comes from outside (a header of
    # a message anyone on the broker may publish, a task argument).
    given = signature.encode("utf-8", "replace") if isinstance(signature, str) else signature
    if not hmac.compare_digest(sign_bytes(body).encode(), given):
        raise BadSignature("signature mismatch")
    return body


def _canonical(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()


def sign(payload: dict[str, Any]) -> str:
    """Signature of a Celery task payload (a dict travelling as a task argument)."""
    return sign_bytes(_canonical(payload))


def verify(payload: Any, signature: Any) -> dict[str, Any]:
    if not isinstance(payload, dict) or not isinstance(signature, str):
        raise BadSignature("malformed task body")
    verify_bytes(_canonical(payload), signature)
    return payload
