"""SQL for the hottest statements, built once from the models' own metadata.

Django's ORM compiles every query on every call: for the confirm's thousand
rows (bulk_create) and for a payment's two single-row statements that was most
of the CPU spent (README, "The cost of a click"). The few statements on those
paths are written here as SQL text over the model's table and column names,
with the same value conventions as the ORM (aware datetimes stored as naive
UTC, USE_TZ); everything else keeps using the ORM.
"""
from __future__ import annotations

from datetime import datetime, timezone as dt_timezone
from typing import Iterable, Sequence

from django.db import connection, models


def _db_value(v):
    # Django stores aware datetimes as naive UTC on MySQL (USE_TZ); so does this.
    # As text: the driver formats a str far faster than a datetime.
    if isinstance(v, datetime):
        if v.tzinfo is not None:
            v = v.astimezone(dt_timezone.utc).replace(tzinfo=None)
        return v.isoformat(" ", "microseconds")
    return v


def _py_value(v):
    if isinstance(v, datetime) and v.tzinfo is None:
        return v.replace(tzinfo=dt_timezone.utc)
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


def bulk_insert(model: type[models.Model], fields: Sequence[str], rows: Iterable[Sequence]) -> int:
    """INSERT rows (values in the order of `fields`, model field names) in one
    statement per call of the driver. Returns how many rows were sent."""
    memo: dict = {}  # the same `now` sits in every row: format it once

    def value(v):
        if isinstance(v, datetime):
            text = memo.get(v)
            if text is None:
                text = memo[v] = _db_value(v)
            return text
        return v

    rows = [tuple(value(v) for v in row) for row in rows]
    if not rows:
        return 0
    marks = ", ".join(["%s"] * len(fields))
    sql = f"INSERT INTO {table(model)} ({', '.join(columns(model, fields))}) VALUES ({marks})"
    with connection.cursor() as cur:
        cur.executemany(sql, rows)
    return len(rows)
