"""One declaration per API operation: its method and path, parameters, body
and every answer with its codes. The handlers check their input through it
(`Text.accepts`, `Body.read`, `Param.wire_accepts`) and `/api/schema/` is rendered from
it (`openapi_document`), so the two cannot drift. The apps declare their
operations (orders.api.declarations, inventory.api.declarations); the site's
urls route them (`routes`).

Patterns are written with explicit character ranges and `\\uXXXX` escapes
only: Python's `re` (the server and the test generators), ECMA 262 (JSON
Schema) and Rust's regex (the validators of schemathesis) read them alike.

Rooms: `values` (what a field may hold, parameters, bodies), `answers` (an
answer and the shared ones), `operations` (an operation, the schema, routes).
"""
from core.api.answers import (  # noqa: F401
    AUTH_ANSWERS,
    BODY_ANSWERS,
    ERROR_FIELDS,
    INVALID,
    MAYBE_MOMENT,
    MOMENT,
    PAGE,
    RETRY_AFTER,
    THROTTLED,
    TOO_LARGE,
    UNAUTHENTICATED,
    UNAVAILABLE,
    UNSUPPORTED,
    Answer,
    merge_answers,
    page_checked,
    refusal,
    throttled,
)
from core.api.operations import JsonOnly, Operation, json_response, openapi_document, routes, schema_view  # noqa: F401
from core.api.values import (  # noqa: F401
    MONEY_PATTERN,
    Body,
    Field,
    Money,
    Param,
    Text,
    Whole,
    ascii_pattern,
    text_pattern,
)
