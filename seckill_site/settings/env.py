"""Reading settings from the environment: the helpers every settings module uses."""
from __future__ import annotations

import hashlib
import os


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw not in (None, "") else default


_PERIODS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000}


def parse_rate(raw: str) -> tuple[int, int]:
    """ "10/s" -> (a bucket of 10, one request earned back every 100 ms); "0" -> off."""
    raw = raw.strip()
    if raw in ("", "0", "off"):
        return 0, 0
    try:
        count, period = raw.split("/")
        n, unit = int(count), period.strip()[0]
        if n < 1 or unit not in _PERIODS_MS:
            raise ValueError
    except (ValueError, IndexError):
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"SECKILL_THROTTLE_RATE: expected N/s, N/m, N/h or 0, got {raw!r}") from None
    return n, max(1, _PERIODS_MS[unit] // n)


def derive_signing_key(secret: str) -> str:
    """A development signing key, derived from the development secret (local
    settings only; production requires SECKILL_TASK_SIGNING_KEY of its own)."""
    return hashlib.sha256(("seckill-task-signing:" + secret).encode()).hexdigest()
