"""WSGI entry point: `gunicorn seckill_site.wsgi:application`.

Two Django handlers share the process: the REST API (`/api/v1/...`) runs
through API_MIDDLEWARE, the rest of the site (admin, reports, schema) through
MIDDLEWARE. The API is token-authenticated JSON: sessions, CSRF, messages,
frame options, the admin's login lockout and static files do nothing for it,
and on the sold-out click they cost about a sixth of the web CPU (docs/benchmark.md,
"The cost of a click").
"""
import os

from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "seckill_site.settings.local")

API_PREFIX = "/api/v1/"


class ApiHandler(WSGIHandler):
    """A Django handler whose middleware chain is settings.API_MIDDLEWARE."""

    def load_middleware(self, is_async=False):
        # Django builds the chain from settings.MIDDLEWARE; this runs once, at
        # start-up, before any request is served.
        site_middleware = settings.MIDDLEWARE
        settings.MIDDLEWARE = settings.API_MIDDLEWARE
        try:
            super().load_middleware(is_async)
        finally:
            settings.MIDDLEWARE = site_middleware


class Application:
    def __init__(self):
        self.site = get_wsgi_application()  # also sets Django up
        self.api = ApiHandler()

    def __call__(self, environ, start_response):
        api = environ.get("PATH_INFO", "").startswith(API_PREFIX)
        return (self.api if api else self.site)(environ, start_response)


application = Application()
