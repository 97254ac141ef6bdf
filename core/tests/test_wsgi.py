"""The WSGI entry point serves the API through its short middleware chain and
the site through the full one (seckill_site.wsgi)."""
from __future__ import annotations

import json
from wsgiref.util import setup_testing_defaults

import pytest

from seckill_site.wsgi import application


def call(path: str, method: str = "GET") -> tuple[str, dict[str, list[str]], bytes]:
    environ: dict = {"PATH_INFO": path, "REQUEST_METHOD": method, "HTTP_HOST": "localhost"}
    setup_testing_defaults(environ)
    seen: dict = {}

    def start_response(status, headers, exc_info=None):
        seen["status"] = status
        seen["headers"] = {}
        for name, value in headers:
            seen["headers"].setdefault(name.lower(), []).append(value)

    body = b"".join(application(environ, start_response))
    return seen["status"], seen["headers"], body


@pytest.mark.django_db
def test_an_api_call_runs_only_the_api_chain():
    status, headers, body = call("/api/v1/orders")
    assert status.startswith("401")
    assert json.loads(body)["code"] == "not_authenticated"
    assert headers["x-content-type-options"] == ["nosniff"]  # SecurityMiddleware ran
    # Nothing of sessions, CSRF, messages or frame options touched the answer.
    assert "x-frame-options" not in headers
    assert "set-cookie" not in headers
    assert "cookie" not in ",".join(headers.get("vary", [])).lower()


@pytest.mark.django_db
def test_the_admin_keeps_the_full_chain():
    status, headers, _ = call("/admin/login/")
    assert status.startswith("200")
    assert headers["x-frame-options"] == ["DENY"]
    assert any(c.strip().startswith("csrftoken=") for c in headers.get("set-cookie", []))
    assert headers["x-content-type-options"] == ["nosniff"]
