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


def parse_rate(raw: str, name: str = "SECKILL_THROTTLE_RATE") -> tuple[int, int]:
    """ "10/s" -> (a bucket of 10, one request earned back every 100 ms); "0" -> off.
    `name` is the variable's, for the error."""
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

        raise ImproperlyConfigured(f"{name}: expected N/s, N/m, N/h or 0, got {raw!r}") from None
    return n, max(1, _PERIODS_MS[unit] // n)


def derive_signing_key(secret: str) -> str:
    """A development signing key, derived from the development secret (local
    settings only; production requires SECKILL_TASK_SIGNING_KEY of its own)."""
    return hashlib.sha256(("seckill-task-signing:" + secret).encode()).hexdigest()


CLUSTER_SCHEME = "redis+cluster://"


def _improper(message: str):
    from django.core.exceptions import ImproperlyConfigured

    return ImproperlyConfigured(message)


def parse_cluster_url(url: str) -> list[tuple[str, int]]:
    """The seed nodes of `redis+cluster://[user:password@]host:port[,host:port...][/0]`;
    [] for any other URL (one Redis). A cluster has database 0 only."""
    if not url.startswith(CLUSTER_SCHEME):
        return []
    rest = url[len(CLUSTER_SCHEME):]
    hosts, _, db = rest.partition("/")
    if db not in ("", "0"):
        raise _improper(f"REDIS_URL: a Redis Cluster has database 0 only, got /{db}")
    hosts = hosts.rpartition("@")[2]
    nodes = []
    for part in hosts.split(","):
        host, _, port = part.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise _improper("REDIS_URL: expected redis+cluster://[user:password@]host:port[,host:port...]")
        nodes.append((host.strip("[]"), int(port)))
    return nodes


def parse_cluster_credentials(url: str) -> tuple[str | None, str | None]:
    """(username, password) of a redis+cluster:// URL, each None when absent
    (percent-encoded in the URL, as in a redis:// one)."""
    from urllib.parse import unquote

    if not url.startswith(CLUSTER_SCHEME):
        return None, None
    auth = url[len(CLUSTER_SCHEME):].partition("/")[0].rpartition("@")[0]
    if not auth:
        return None, None
    user, sep, password = auth.partition(":")
    if not sep:
        return None, unquote(user) or None
    return unquote(user) or None, unquote(password) or None


def parse_redis_prefix(raw: str) -> str:
    """The first part of every Redis key: letters, digits, '-' and '_' (no hash
    tag braces, no glob characters: key scans match on it)."""
    raw = raw.strip()
    if not raw or not all(c.isalnum() or c in "-_" for c in raw) or len(raw) > 32:
        raise _improper(f"SECKILL_REDIS_PREFIX: letters, digits, '-' and '_' (at most 32), got {raw!r}")
    return raw


def parse_retention_days(raw: str) -> float:
    """Days a row nothing depends on is kept (fractions allowed; unset: 30).
    Below one day the retention sweep would delete the orders of a sale that is
    still being paid and reconciled, so 0 or a negative number, which would
    purge at once, stops the start instead."""
    raw = raw.strip()
    try:
        days = float(raw) if raw else 30.0
    except ValueError:
        raise _improper(f"SECKILL_RETENTION_DAYS: a number of days, got {raw!r}") from None
    if not days >= 1:  # also NaN
        raise _improper(f"SECKILL_RETENTION_DAYS must be 1 or more (days), got {raw!r}: below that the retention "
                        f"sweep would delete rows a sale still needs")
    return days


def parse_db_retry_seconds(raw: str) -> float:
    """Seconds a request waits for the database to come back (unset: 10: after
    the cluster's writer dies, the front moves in about a second and the first
    write commits about 6 s after the loss). More than a minute holds
    a web thread longer than any client waits, so it stops the start."""
    raw = raw.strip()
    try:
        seconds = float(raw) if raw else 10.0
    except ValueError:
        raise _improper(f"SECKILL_DB_RETRY_SECONDS: a number of seconds, got {raw!r}") from None
    if not 0 <= seconds <= 60:  # also NaN
        raise _improper(f"SECKILL_DB_RETRY_SECONDS must be between 0 and 60, got {raw!r}")
    return seconds
