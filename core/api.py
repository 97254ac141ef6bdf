"""One declaration per API operation: its method and path, parameters, body
and every answer with its codes. The handlers check their input through it
(`Text.accepts`, `Body.read`, `Param.wire_accepts`) and `/api/schema/` is rendered from
it (`openapi_document`), so the two cannot drift. The apps declare their
operations (orders.api.declarations, inventory.api.declarations); the site's
urls route them (`routes`).

Patterns are written with explicit character ranges and `\\uXXXX` escapes
only: Python's `re` (the server and the test generators), ECMA 262 (JSON
Schema) and Rust's regex (the validators of schemathesis) read them alike.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Callable

from django.http import HttpRequest, HttpResponse
from django.urls import path as url_path
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions
from rest_framework.negotiation import BaseContentNegotiation

from core.errors import DomainError, InvalidInput, TooLarge, Unavailable
from core.exception_handler import DRF_CODES

# C0, DEL and C1 controls, and what str.strip() takes off the ends of a string.
_CONTROLS = r"\u0000-\u001f\u007f-\u009f"
_SPACES = r"\u0020\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"


def text_pattern(max_length: int) -> str:
    """1..max_length characters, no control character, no space at either end."""
    edge, inner = f"[^{_CONTROLS}{_SPACES}]", f"[^{_CONTROLS}]"
    return f"^{edge}(?:{inner}{{0,{max_length - 2}}}{edge})?$"


def ascii_pattern(max_length: int) -> str:
    """1..max_length visible ASCII characters, spaces inside only (an HTTP
    header value: the server strips spaces at its ends before Django sees it)."""
    return f"^[\\u0021-\\u007e](?:[\\u0020-\\u007e]{{0,{max_length - 2}}}[\\u0021-\\u007e])?$"


# --- value constraints -------------------------------------------------------

@dataclass(frozen=True)
class Text:
    max_length: int
    pattern: str
    min_length: int = 1
    description: str = ""
    example: str | None = None
    nullable: bool = False
    enum: tuple[str, ...] = ()

    def __post_init__(self):
        # One closure over locals: the check runs on every purchase.
        match, low, high, enum = re.compile(self.pattern).fullmatch, self.min_length, self.max_length, self.enum

        def accepts(value: object) -> bool:
            # `fullmatch`: the `$` of a ^...$ pattern also matches before a
            # final newline, which `match` would then leave unread (accepted).
            return type(value) is str and low <= len(value) <= high and match(value) is not None \
                and (not enum or value in enum)

        object.__setattr__(self, "accepts", accepts)

    def schema(self) -> dict:
        out: dict[str, Any] = {"type": "string", "minLength": self.min_length, "maxLength": self.max_length,
                               "pattern": self.pattern}
        if self.enum:
            out = {"type": "string", "enum": list(self.enum)}
        return _described(out, self)

    def rule(self) -> str:
        return f"{self.min_length} to {self.max_length} characters matching {self.pattern}"


@dataclass(frozen=True)
class Whole:
    minimum: int
    maximum: int | None = None
    description: str = ""
    example: int | None = None
    nullable: bool = False

    def __post_init__(self):
        low, high = self.minimum, self.maximum if self.maximum is not None else float("inf")
        object.__setattr__(self, "accepts", lambda value: type(value) is int and low <= value <= high)

    def schema(self) -> dict:
        out: dict[str, Any] = {"type": "integer", "minimum": self.minimum}
        if self.maximum is not None:
            out["maximum"] = self.maximum
        return _described(out, self)

    def rule(self) -> str:
        return f"a whole number from {self.minimum}" + (f" to {self.maximum}" if self.maximum is not None else "")


# A non-negative amount with at most two decimals, as text ("199.00", "5", "0.5").
MONEY_PATTERN = "^(?:0|[1-9][0-9]{0,11})(?:[.][0-9]{1,2})?$"
_money_match = re.compile(MONEY_PATTERN).match


@dataclass(frozen=True)
class Money:
    """An amount of money: decimal text (what the API answers), or a JSON
    number with the same constraint. `value` gives its exact Decimal: a
    number is read from its shortest text, never through binary arithmetic."""

    description: str = ""
    example: str | None = None
    nullable: bool = False

    def __post_init__(self):
        object.__setattr__(self, "accepts", lambda value: self.value(value) is not None)

    @staticmethod
    def value(raw: object) -> Decimal | None:
        if type(raw) in (int, float):
            raw = repr(raw)
            if raw.endswith(".0"):
                raw = raw[:-2]
        if type(raw) is not str or len(raw) > 15 or _money_match(raw) is None:
            return None
        return Decimal(raw)

    def schema(self) -> dict:
        return _described({"oneOf": [{"type": "string", "pattern": MONEY_PATTERN},
                                     {"type": "number", "minimum": 0, "multipleOf": 0.01}]}, self)

    def rule(self) -> str:
        return "an amount of 0 or more with at most two decimals (\"199.00\")"


def _described(out: dict, spec) -> dict:
    if spec.description:
        out["description"] = spec.description
    if spec.example is not None:
        out["example"] = spec.example
    if spec.nullable:
        out["nullable"] = True
    return out


# --- parameters and bodies ------------------------------------------------------

@dataclass(frozen=True)
class Param:
    """A path, query or header parameter; `meta_key` is where WSGI puts it."""

    name: str
    location: str  # "path" | "query" | "header"
    spec: Text | Whole
    required: bool = True
    description: str = ""

    @property
    def meta_key(self) -> str:
        return "HTTP_" + self.name.upper().replace("-", "_")

    def wire_accepts(self, raw: str) -> bool:
        """A value as it came over the wire (always text)."""
        if isinstance(self.spec, Whole):
            # Digits only: int() would also take " 7", "+7" and "7_0".
            return raw.isascii() and raw.isdigit() and self.spec.accepts(int(raw))
        return self.spec.accepts(raw)

    def openapi(self) -> dict:
        out = {"name": self.name, "in": self.location, "required": self.required, "schema": self.spec.schema()}
        if self.description:
            out["description"] = self.description
        return out


@dataclass(frozen=True)
class Field:
    name: str
    spec: Text | Whole | Money
    required: bool = True


@dataclass(frozen=True)
class Body:
    """A JSON object body. Unknown properties are ignored (the schema says so
    with additionalProperties: true); `required=False`: an empty body is {}."""

    fields: tuple[Field, ...]
    description: str = ""
    required: bool = True

    def __post_init__(self):
        object.__setattr__(self, "_checks", tuple(
            (f.name, f.spec.accepts, f.spec.nullable or not f.required) for f in self.fields))

    def read(self, data: object) -> tuple:
        """The fields' values in declaration order (None for an absent optional
        one), or 400 `invalid` with the errors per field."""
        if type(data) is not dict:
            raise exceptions.ValidationError({"non_field_errors": ["The body must be a JSON object."]})
        values = []
        for name, accepts, optional in self._checks:
            value = data.get(name)
            if not accepts(value) and not (optional and value is None):
                raise exceptions.ValidationError(self._errors(tuple(data.get(f.name) for f in self.fields)))
            values.append(value)
        return tuple(values)

    def _errors(self, values: tuple) -> dict[str, list[str]]:
        errors = {}
        for f, value in zip(self.fields, values):
            if value is None and (f.spec.nullable or not f.required):
                continue
            if value is None:
                errors[f.name] = ["This field is required."]
            elif not f.spec.accepts(value):
                errors[f.name] = [f"Must be {f.spec.rule()}."]
        return errors

    def schema(self) -> dict:
        return {"type": "object", "required": [f.name for f in self.fields if f.required],
                "properties": {f.name: f.spec.schema() for f in self.fields},
                "additionalProperties": True,
                "description": (self.description + " " if self.description else "")
                + "Properties not listed here are ignored."}


# --- answers -------------------------------------------------------------------

ERROR_FIELDS = {
    "detail": {"type": "string", "description": "Human text."},
    "errors": {"type": "object", "description": "400 invalid: what is wrong, per field.",
               "additionalProperties": {"type": "array", "items": {"type": "string"}}},
}


@dataclass(frozen=True)
class Answer:
    """One status of an operation: `body` a component name (or an inline
    schema), or `codes`: an error body whose `code` is one of them."""

    status: int
    description: str
    body: str | dict | None = None
    codes: tuple[str, ...] = ()
    headers: tuple[tuple[str, dict, bool], ...] = ()  # (name, schema, required)

    def openapi(self) -> dict:
        out: dict[str, Any] = {"description": self.description}
        schema = self.body
        if self.codes:
            schema = {"type": "object", "required": ["code", "detail"],
                      "properties": {"code": {"type": "string", "enum": list(self.codes)}, **ERROR_FIELDS}}
        if isinstance(schema, str):
            schema = {"$ref": f"#/components/schemas/{schema}"}
        if schema is not None:
            out["content"] = {"application/json": {"schema": schema}}
        if self.headers:
            out["headers"] = {name: {"schema": s, "required": req} for name, s, req in self.headers}
        return out


def merge_answers(*answers: Answer) -> tuple[Answer, ...]:
    """One Answer per status: the codes of the same status are joined."""
    by_status: dict[int, Answer] = {}
    for a in answers:
        prior = by_status.get(a.status)
        if prior is None:
            by_status[a.status] = a
        else:
            codes = prior.codes + tuple(c for c in a.codes if c not in prior.codes)
            by_status[a.status] = Answer(a.status, prior.description + " " + a.description, prior.body or a.body,
                                         codes, prior.headers + a.headers)
    return tuple(by_status[s] for s in sorted(by_status))


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


# --- the answers many operations share -------------------------------------------

def refusal(*errors: type[DomainError], description: str = "") -> tuple[Answer, ...]:
    """Error answers for domain errors, one per status, with their codes."""
    return merge_answers(*(Answer(e.http_status, description or e.message, codes=(e.code,)) for e in errors))


RETRY_AFTER = ("Retry-After", {"type": "integer", "minimum": 1, "description": "Seconds to wait."}, True)
UNAUTHENTICATED = Answer(401, "No token, a token of another scheme, or a wrong one.",
                         codes=(DRF_CODES[exceptions.NotAuthenticated], DRF_CODES[exceptions.AuthenticationFailed]),
                         headers=(("WWW-Authenticate", {"type": "string", "enum": ["Token"]}, True),))


def throttled(budget: str = "") -> Answer:
    """429: over this address's failed authentications, or over the user's
    `budget` (its words and setting) when the operation spends from one."""
    over = f"this user's {budget}, or " if budget else ""
    return Answer(429, f"Over a rate: {over}this address's failed authentications. Nothing was taken or changed.",
                  codes=(DRF_CODES[exceptions.Throttled],), headers=(RETRY_AFTER,))


THROTTLED = throttled()
UNAVAILABLE = Answer(503, "A backing store (MySQL, Redis, the broker) is down: nothing was taken. "
                          "The only 5xx a client sees.", codes=(Unavailable.code,))
INVALID = Answer(400, "The body is not JSON, is hostile (nesting over 32 levels, a number over 64 characters, "
                      "a string over 4096, not UTF-8), or breaks a constraint of the schema.",
                 codes=(InvalidInput.code,))
TOO_LARGE = Answer(413, "The body is over SECKILL_MAX_BODY_BYTES.", codes=(TooLarge.code,))
UNSUPPORTED = Answer(415, "A body that is not application/json.",
                     codes=(DRF_CODES[exceptions.UnsupportedMediaType],))
BODY_ANSWERS = (INVALID, TOO_LARGE, UNSUPPORTED)
AUTH_ANSWERS = (UNAUTHENTICATED, THROTTLED)


PAGE = Param("page", "query", Whole(1), required=False,
             description="1 by default; a page past the last, or a value that is not a whole number >= 1, "
                         "is 404 not_found.")


def page_checked(query) -> None:
    """404 `not_found` unless `page` is absent or a whole number >= 1 (DRF's
    paginator alone would take `page=` as 1 and `page=last` as the last page)."""
    raw = query.get(PAGE.name)
    if raw is not None and not PAGE.wire_accepts(raw):
        raise exceptions.NotFound("Invalid page.")


class JsonOnly(BaseContentNegotiation):
    """DRF views answer JSON whatever the Accept header asks, as the lean
    handlers do: the schema declares no other media type and no 406."""

    def select_parser(self, request, parsers):
        return parsers[0]

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type
