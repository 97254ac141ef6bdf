"""The API docs pages (Swagger UI and Redoc from drf-spectacular-sidecar): they
load, and everything they reference comes from this server, so they work on a
machine without internet access and tell no third party who reads them."""
from __future__ import annotations

import re

from django.test import Client

# Every URL in an attribute or in inline code: absolute ones name a host.
ABSOLUTE = re.compile(r"""(?:https?:)?//[^\s"'<>)]+""")
REFERENCED = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']""")


def page(path: str) -> str:
    response = Client().get(path)
    assert response.status_code == 200, (path, response.status_code)
    assert response["Content-Type"].startswith("text/html")
    return response.content.decode()


def assets_served(html: str) -> list[str]:
    """The page's own scripts, styles and icons, each fetched through the same
    middleware chain as the page (WhiteNoise serves them in every setting)."""
    assets = [a for a in REFERENCED.findall(html) if not ABSOLUTE.match(a)]
    assert assets
    client = Client()
    for url in assets:
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        body = b"".join(response.streaming_content) if response.streaming else response.content
        assert body, url
    return assets


def test_swagger_ui_loads_with_local_assets_only(live_db):
    html = page("/api/docs/")
    assert ABSOLUTE.findall(html) == []
    assets = assets_served(html)
    assert any(a.endswith("swagger-ui-bundle.js") for a in assets)
    assert "/api/schema/" in html  # the page reads this server's schema


def test_redoc_loads_and_its_script_is_served_locally(live_db):
    html = page("/api/docs/redoc/")
    scripts = re.findall(r"""<script[^>]+src=["']([^"']+)""", html)
    assert scripts and all(s.startswith("/static/") for s in scripts), scripts
    assert any(a.endswith("redoc.standalone.js") for a in assets_served(html))
    assert "/api/schema/" in html


def test_redoc_references_no_other_host(live_db):
    assert ABSOLUTE.findall(page("/api/docs/redoc/")) == []
