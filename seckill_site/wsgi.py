"""WSGI entry point of both web servers: `python -m seckill_site.serve`
(granian, the default) and `gunicorn seckill_site.wsgi:application`.

Two Django handlers share the process: the REST API (`/api/v1/...`) runs
through API_MIDDLEWARE, the rest of the site (admin, reports, schema) through
MIDDLEWARE. The API is token-authenticated JSON: sessions, CSRF, messages,
frame options, the admin's login lockout and static files do nothing for it,
and they cost the hottest click CPU (measured in docs/benchmark.md, "The cost
of a click"). Django has no setting for a second chain: the handler that
builds one is in seckill_site/adapters/django.py.
"""
import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

from core import admission, client, connections
from seckill_site import webserver
from seckill_site.adapters.django import MiddlewareChainHandler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "seckill_site.settings.local")


# The probes skip the gate: under a flood of purchases the health check and a
# scraper's metrics still answer, from threads the gate leaves spare
# (seckill_site/webserver.py). Each has a small bound of its own instead, so a
# flood of probes cannot hold every thread. Only a metrics request with a
# bearer token is a probe: it is served through the API's chain, with no
# session, so a made-up token costs no MySQL lookup; a staff browser's
# (a session) waits at the gate like every other page.
HEALTH_PATH = f"{webserver.API_PREFIX}health"
METRICS_PATH = "/reconciliation/metrics"


def is_bearer(environ) -> bool:
    """The request presents a bearer token (the scheme is case-insensitive)."""
    return environ.get("HTTP_AUTHORIZATION", "")[:7].lower() == "bearer "


class Application:
    """Routes a request to the API's handler or the site's, through the
    process's bounded backlog (core.admission), with a MySQL connection lent
    for the request (core.connections)."""

    def __init__(self):
        self.site = get_wsgi_application()  # also sets Django up
        self.api = MiddlewareChainHandler(settings.API_MIDDLEWARE)
        self.gate = admission.Gate(slots=webserver.SLOTS, queue=webserver.QUEUE, wait_s=webserver.QUEUE_WAIT_S)
        self.probes = {path: admission.Gate(slots=webserver.PROBE_SLOTS, queue=0, wait_s=0)
                       for path in (HEALTH_PATH, METRICS_PATH)}
        self.db = connections.Lender(keep=webserver.SLOTS)
        self.forwarding = client.ForwardingWatch()

    def __call__(self, environ, start_response):
        if self.forwarding.active:
            self.forwarding.see(environ)
        path = environ.get("PATH_INFO", "")
        probe = self.probes.get(path)
        if probe is not None and (path == HEALTH_PATH or is_bearer(environ)):
            return self._probe(probe, environ, start_response)
        handler = self.api if path.startswith(webserver.API_PREFIX) else self.site
        if not self.gate.enter():
            return admission.refuse(start_response)
        admission.held(self.gate)
        try:
            return self._serve(handler, environ, start_response)
        finally:
            admission.held(None)
            self.gate.leave()

    def _probe(self, gate: admission.Gate, environ, start_response):
        if not gate.enter():
            return admission.refuse(start_response)
        try:
            return self._serve(self.api, environ, start_response)
        finally:
            gate.leave()

    def _serve(self, handler, environ, start_response):
        db = self.db.lend()
        try:
            return _whole(handler(environ, start_response))
        finally:
            self.db.take_back(db)


def _whole(response):
    """A response held in memory as one list of bytes, closed (Django's
    request_finished) before the server writes it: the server sends a list in
    one call instead of iterating the response object back through Python.
    Streaming responses (exports) are passed on as they are."""
    if getattr(response, "streaming", True):
        return response
    body = response.content
    response.close()
    return [body]


application = Application()
