"""Test support, by what it provides (the root conftest.py only registers the fixtures):

- processes: the test database and real worker / gunicorn processes (`worker`, `web`, `start_worker`, ...)
- factories: unique ids, SKUs, buyers, staff users (`make_sku`, `make_buyers`, `make_staff`, `unique`)
- http: clients of the API, in-process (`api`, `post_order`, `place`) and over real HTTP (`Http`, `sell`)
- purchase: steps of the purchase path played by hand (`reserve_direct`, `publish`, `fence_reached`)
- payments: the payment provider played by hand (`capture`, `sign`, `hook`) and orders awaiting payment (`pending`)
- stores: assertions about MySQL, Redis and RabbitMQ (`assert_balanced`, `settled`, `confirmed`, ...), and
  Redis lost alike on one Redis or a cluster (`on_cluster`, `redis_wipe`, `scripts_flush`, `instance_key_of`)
- faults: faults landed on a running sale (`sell_during`, `RowHold`, `rabbitmq_restart`)
- browser: headless Chromium driven by Selenium (`browser`, `chromium`, `browser_login`)

Tests share one test database without per-test flushes (the worker and web
processes must see committed rows), so every test makes its own SKUs and buyers
with unique ids.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent


def wait_until(cond: Callable[[], object], *, timeout: float = 20.0, interval: float = 0.05, what: str = "condition"):
    """Poll `cond` until it is true. A database connection lost while polling
    (the cluster's front moved to another node) counts as "not yet": the next
    poll reconnects, as the app's own retries do."""
    from django.db import InterfaceError, OperationalError, connection

    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = cond()
        except (OperationalError, InterfaceError) as exc:
            if not (exc.args and exc.args[0] in (2006, 2013, 1047)) and not isinstance(exc, InterfaceError):
                raise
            connection.close()
            last = None
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last value {last!r})")
