"""What a parameter or a body field may hold (`Text`, `Whole`, `Money`), the
parameters and bodies made of them, and the patterns they are written with:
explicit character ranges and `\\uXXXX` escapes only, so Python's `re` (the
server and the test generators), ECMA 262 (JSON Schema) and Rust's regex (the
validators of schemathesis) read them alike."""
from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from rest_framework import exceptions

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
