"""An operation (method, path, parameters, body, answers), the OpenAPI document
rendered from the operations, and the routes that serve them."""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import path as url_path
from django.views.decorators.csrf import csrf_exempt
from rest_framework.negotiation import BaseContentNegotiation

from core.api.answers import Answer
from core.api.values import Body, Param

# --- operations ---------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Operation:
    operation_id: str
    method: str  # "GET" | "POST"
    path: str  # below the API prefix, OpenAPI style: "orders/{order_id}"
    summary: str
    answers: tuple[Answer, ...]
    params: tuple[Param, ...] = ()
    body: Body | None = None
    authenticated: bool = True
    description: str = ""
    tags: tuple[str, ...] = ()
    links: dict[int, dict] = field(default_factory=dict)

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)

    def openapi(self) -> dict:
        out: dict[str, Any] = {"operationId": self.operation_id, "summary": self.summary,
                               "tags": list(self.tags), "parameters": [p.openapi() for p in self.params],
                               "security": [{"tokenAuth": []}] if self.authenticated else [],
                               "responses": {}}
        if self.description:
            out["description"] = self.description
        if self.body is not None:
            out["requestBody"] = {"required": self.body.required,
                                  "content": {"application/json": {"schema": self.body.schema()}}}
        for answer in self.answers:
            rendered = answer.openapi()
            if answer.status in self.links:
                rendered["links"] = self.links[answer.status]
            out["responses"][str(answer.status)] = rendered
        return out


def openapi_document(operations: list[Operation], *, prefix: str, components: dict[str, dict],
                     info: dict[str, str]) -> dict:
    paths: dict[str, dict] = {}
    for op in operations:
        paths.setdefault(prefix + op.path, {})[op.method.lower()] = op.openapi()
    return {
        "openapi": "3.0.3",
        "info": info,
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"tokenAuth": {
                "type": "apiKey", "in": "header", "name": "Authorization",
                "description": "`Token <key>` (DRF token). Missing: 401 not_authenticated; wrong, or a case "
                               "variant of a valid key: 401 authentication_failed."}},
        },
    }


def schema_view(document: Callable[[], dict]):
    """GET /api/schema/: the document, rendered once per process."""
    rendered: list[bytes] = []

    def view(request: HttpRequest) -> HttpResponse:
        if request.method not in ("GET", "HEAD"):
            return json_response(405, {"code": "method_not_allowed", "detail": "Method not allowed."},
                                 {"Allow": "GET, HEAD"})
        if not rendered:
            rendered.append(json.dumps(document(), indent=1).encode())
        return HttpResponse(rendered[0], content_type="application/vnd.oai.openapi+json")

    return view


# --- routing ------------------------------------------------------------------

def json_response(status: int, body: dict, headers: dict[str, str] | None = None) -> HttpResponse:
    response = HttpResponse(json.dumps(body, separators=(",", ":")), status=status,
                            content_type="application/json")
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def routes(handlers: dict[Operation, Callable]) -> list:
    """Django url patterns for the operations: one view per path that hands each
    declared method to its handler and answers any other 405 with `Allow`."""
    by_path: dict[str, dict[str, Callable]] = {}
    for op, handler in handlers.items():
        by_path.setdefault(op.path, {})[op.method] = handler
    return [url_path(re.sub(r"{(\w+)}", r"<str:\1>", p), _method_view(methods)) for p, methods in by_path.items()]


def _method_view(methods: dict[str, Callable]):
    if "GET" in methods:
        methods = {**methods, "HEAD": methods["GET"]}
    allow = ", ".join(sorted([*methods, "OPTIONS"]))

    @csrf_exempt
    def view(request: HttpRequest, **kwargs) -> HttpResponse:
        handler = methods.get(request.method)
        if handler is not None:
            return handler(request, **kwargs)
        if request.method == "OPTIONS":
            return HttpResponse(status=204, headers={"Allow": allow})
        return json_response(405, {"code": "method_not_allowed",
                                   "detail": f'Method "{request.method}" not allowed.'}, {"Allow": allow})

    return view


class JsonOnly(BaseContentNegotiation):
    """DRF views answer JSON whatever the Accept header asks, as the lean
    handlers do: the schema declares no other media type and no 406."""

    def select_parser(self, request, parsers):
        return parsers[0]

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type
