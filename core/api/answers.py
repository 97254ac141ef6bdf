"""The answers of an operation, each with its status, body and codes, and the
answers many operations share."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rest_framework import exceptions

from core.api.values import Param, Whole
from core.errors import DomainError, InvalidInput, TooLarge, Unavailable
from core.exception_handler import DRF_CODES

# --- answers -------------------------------------------------------------------

ERROR_FIELDS = {
    "detail": {"type": "string", "description": "Human text."},
    "errors": {"type": "object", "description": "400 invalid: what is wrong, per field.",
               "additionalProperties": {"type": "array", "items": {"type": "string"}}},
}
# A moment in an answer's body (always UTC, "...Z"), and one that may be null.
MOMENT = {"type": "string", "format": "date-time"}
MAYBE_MOMENT = {**MOMENT, "nullable": True}


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
