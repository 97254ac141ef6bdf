"""SQL for the hottest statements, built once from the models' own metadata.

Django's ORM compiles every query on every call: for the confirm's thousand
rows (bulk_create) and for a payment's two single-row statements that is most
of the CPU spent (docs/benchmark.md, "The cost of a click"). The few statements on those
paths are written here as SQL text over the model's table and column names,
with the same value conventions as the ORM (aware datetimes stored as naive
UTC, USE_TZ); everything else keeps using the ORM.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime

from django.db import connection, models


def _db_value(v):
    # Django stores aware datetimes as naive UTC on MySQL (USE_TZ); so does this.
    # As text: the driver formats a str far faster than a datetime.
    if isinstance(v, datetime):
        if v.tzinfo is not None:
            v = v.astimezone(UTC).replace(tzinfo=None)
        return v.isoformat(" ", "microseconds")
    return v


def _py_value(v):
    if isinstance(v, datetime) and v.tzinfo is None:
        return v.replace(tzinfo=UTC)
    return v


def table(model: type[models.Model]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def columns(model: type[models.Model], fields: Sequence[str]) -> list[str]:
    """The quoted column names of model fields (`sku` -> `sku_id`)."""
    return [connection.ops.quote_name(model._meta.get_field(f).column) for f in fields]


def execute(sql: str, params: Sequence) -> int:
    """Run one statement; returns the rows it matched (Django connects with
    FOUND_ROWS), so a conditional UPDATE that lost its race gives 0."""
    with connection.cursor() as cur:
        cur.execute(sql, [_db_value(v) for v in params])
        return cur.rowcount


def marks(n: int) -> str:
    """`%s, %s, ...` for an IN list of n values."""
    return ", ".join(["%s"] * n)


def fetch_all(sql: str, params: Sequence) -> list[tuple]:
    with connection.cursor() as cur:
        cur.execute(sql, [_db_value(v) for v in params])
        return [tuple(_py_value(v) for v in row) for row in cur.fetchall()]


def fetch_one(sql: str, params: Sequence) -> tuple | None:
    with connection.cursor() as cur:
        cur.execute(sql, [_db_value(v) for v in params])
        row = cur.fetchone()
    return None if row is None else tuple(_py_value(v) for v in row)


class Insert:
    """One INSERT shape: a model and the fields its rows give, each row a
    mapping by field name (never a positional tuple, whose reordering would
    write values into the wrong columns with the same count of placeholders).

    Checked against the model when built (callers build theirs at import): a
    name the model lacks, a relation's name given twice (`sku` and `sku_id`), or
    a column the model requires that no field names raises at once. A concrete
    field left out that has a default (or allows NULL) is written with it, so a
    new column of that kind needs no edit of the callers."""

    def __init__(self, model: type[models.Model], fields: Sequence[str]):
        self.model, self.fields = model, tuple(fields)
        given = [model._meta.get_field(name) for name in self.fields]  # FieldDoesNotExist: loud
        if any(not f.concrete for f in given):
            raise ValueError(f"{model.__name__}: not a column: {[f.name for f in given if not f.concrete]}")
        if len({f.column for f in given}) != len(given):
            raise ValueError(f"{model.__name__}: a column is named twice in {self.fields}")
        self.defaults: list[models.Field] = []
        for f in model._meta.concrete_fields:
            if f in given or (f.primary_key and isinstance(f, models.AutoField)):
                continue
            if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False) or not (
                    f.has_default() or f.null):
                raise ValueError(f"{model.__name__}.{f.name} has no default: an insert must name it")
            self.defaults.append(f)
        self._sql = ""

    def sql(self) -> str:
        if not self._sql:  # built on first use: quoting needs the connection's backend
            names = [f.name for f in self.defaults]
            cols = columns(self.model, self.fields + tuple(names))
            self._sql = f"INSERT INTO {table(self.model)} ({', '.join(cols)}) VALUES ({marks(len(cols))})"
        return self._sql

    def run(self, rows: Iterable[Mapping[str, object]]) -> int:
        """INSERT the rows in one statement per call of the driver; returns how
        many were sent. A row naming other fields than the shape's raises
        before anything is sent."""
        memo: dict = {}  # the same `now` sits in every row: format it once

        def value(v):
            if isinstance(v, datetime):
                text = memo.get(v)
                if text is None:
                    text = memo[v] = _db_value(v)
                return text
            return v

        fields, n = self.fields, len(self.fields)
        tail = tuple(value(f.get_default()) for f in self.defaults)
        out = []
        for row in rows:
            if len(row) != n:
                raise ValueError(f"{self.model.__name__} row names {sorted(set(row) ^ set(fields))} "
                                 f"beyond or short of {fields}")
            out.append(tuple(value(row[f]) for f in fields) + tail)  # KeyError: a name the shape lacks
        if not out:
            return 0
        with connection.cursor() as cur:
            cur.executemany(self.sql(), out)
        return len(out)
