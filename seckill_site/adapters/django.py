"""Django's handler internals the WSGI entry point relies on (seckill_site/wsgi.py).

Django builds a handler's middleware chain from settings.MIDDLEWARE alone and
offers no way to give one handler another list. What this uses that Django
does not document, read against Django 5.2.19 (django/core/handlers/base.py
and wsgi.py): `BaseHandler.load_middleware(is_async=False)`, which
`WSGIHandler.__init__` calls once and which reads `settings.MIDDLEWARE` while
it runs, and nothing else.
"""
from __future__ import annotations

from core.adapters import require

WRITTEN_FOR = {"Django": ("5.2.19",)}
require(WRITTEN_FOR, __file__)  # before Django's handler: another version fails here, by name

from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler


class MiddlewareChainHandler(WSGIHandler):
    """A Django WSGI handler whose middleware chain is the list given, not
    settings.MIDDLEWARE; the rest of the process keeps settings.MIDDLEWARE."""

    def __init__(self, middleware: list[str]):
        self.middleware_paths = list(middleware)
        super().__init__()  # builds the chain

    def load_middleware(self, is_async=False):
        # Runs once, when the handler is made at start-up, before any request:
        # nothing else reads the setting while it holds this handler's list.
        site_middleware = settings.MIDDLEWARE
        settings.MIDDLEWARE = self.middleware_paths
        try:
            super().load_middleware(is_async)
        finally:
            settings.MIDDLEWARE = site_middleware
