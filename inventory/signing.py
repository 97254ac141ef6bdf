"""HMAC signatures for task bodies: a consumer refuses a body it did not sign.

The key comes from the environment (SECKILL_TASK_SIGNING_KEY, or derived from
DJANGO_SECRET_KEY), so a message forged on a shared broker changes nothing.
"""
from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from django.conf import settings


class BadSignature(Exception):
    """A task body whose signature does not match: never executed."""


def _canonical(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()


def sign(payload: dict[str, Any]) -> str:
    return hmac.new(settings.CELERY_TASK_SIGNING_KEY.encode(), _canonical(payload), hashlib.sha256).hexdigest()


def verify(payload: Any, signature: Any) -> dict[str, Any]:
    if not isinstance(payload, dict) or not isinstance(signature, str):
        raise BadSignature("malformed task body")
    if not hmac.compare_digest(sign(payload), signature):
        raise BadSignature("signature mismatch")
    return payload
