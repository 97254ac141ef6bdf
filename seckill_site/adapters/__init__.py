"""Other people's internals the project package relies on, one module per library.

Each module states the exact versions it was read against and refuses any
other at import (core.adapters.require), so an upgrade stops at the first
import (the tests, a server's start) instead of changing behaviour unnoticed.

    granian.py  the process server behind `python -m seckill_site.serve`
    celery.py   the worker's task consumer and the app's pooled broker connections
    django.py   a WSGI handler with a middleware chain of its own

What core itself relies on is in core/adapters/ (redis-py below its client).
docs/architecture.md ("Other people's internals") says what to do on an upgrade.
"""
