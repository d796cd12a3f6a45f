"""Rows of raw statements read into model instances, by a reader of the model's columns
worked out once.

Django's ``RawQuerySet`` works out on every query which field each column is, in what
order, and how to convert it; for a run's forty columns that cost more than the query
(reading runs so was an eighth of the embedded server's time at 32 clients, py-spy,
2026-12-05). The hot raw statements read through :func:`read` instead.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connection, models
from django.db.models import Field


@dataclass(frozen=True)
class RowReader:
    """How a row of a model's columns (all but ``without``) becomes an instance."""

    columns: str                     # quoted, for SELECT or RETURNING
    names: frozenset[str]            # the attnames read
    # (column index, converters, expression), as SQLCompiler.get_converters makes them
    converters: tuple[tuple[int, tuple[Callable[..., Any], ...], Any], ...]


@functools.cache
def concrete_fields(model: type[models.Model]) -> tuple[Field[Any, Any], ...]:
    """The model's columns, in the order of its table."""
    return tuple(field for field in model._meta.concrete_fields if isinstance(field, Field))


@functools.cache
def reader(model: type[models.Model], without: tuple[str, ...] = ()) -> RowReader:
    """The reader of ``model`` without the fields ``without``. Its backend converters are
    bound to the operations of the connection that made it: they read only the settings
    (the time zone), the same for every connection of the process, which each call passes
    its own of."""
    fields = [field for field in concrete_fields(model) if field.name not in without]
    quote = connection.ops.quote_name
    converters = []
    for index, field in enumerate(fields):
        column = field.get_col(model._meta.db_table)
        functions = (*connection.ops.get_db_converters(column), *column.get_db_converters(connection))
        if functions:
            converters.append((index, tuple(functions), column))
    return RowReader(", ".join(quote(str(field.column)) for field in fields),
                     frozenset(field.attname for field in fields), tuple(converters))


def select[M: models.Model](model: type[M], tail: str, params: list[Any],
                            without: tuple[str, ...] = ()) -> list[M]:
    """``SELECT`` the columns of ``reader(model, without)`` ``FROM`` the model's table, then
    ``tail`` (its WHERE, ORDER BY, FOR UPDATE), read by :func:`read`."""
    table = connection.ops.quote_name(model._meta.db_table)
    return read(model, f"SELECT {reader(model, without).columns} FROM {table} {tail}", params, without)


def read[M: models.Model](model: type[M], sql: str, params: list[Any], without: tuple[str, ...] = ()) -> list[M]:
    """The instances of ``model`` that ``sql`` reads, which reads the columns of
    ``reader(model, without)``."""
    how = reader(model, without)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    instances = []
    for row in rows:
        values = list(row)
        for index, functions, expression in how.converters:
            value = values[index]
            for convert in functions:
                value = convert(value, expression, connection)
            values[index] = value
        instances.append(model.from_db(connection.alias, how.names, values))
    return instances
