"""Setting one top-level key of a JSON column in the database, without sending the document.

A refresh record's ``result`` lists every change: megabytes for a fleet-wide apply. Its Nodes'
answers, known only after the swap, are one key of it (``node_pushes``); writing the whole
document again to set them cost about 0.2 s at 3,000 Nodes, most of it encoding it again. SQLite
(``json_set``) and PostgreSQL (``jsonb_set``) set the key in their own C code.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.expressions import Expression
from django.db.models.sql.compiler import SQLCompiler


class JSONKeySet(Expression):
    """``column`` (a JSON object) with its top-level ``key`` set to ``value``, for ``update``,
    on the two databases the Edge runs on; ``key`` must be a plain identifier."""

    output_field = models.JSONField()

    def __init__(self, column: str, key: str, value: Any) -> None:
        super().__init__()
        if not key.isidentifier():
            raise ValueError(f"not a plain key: {key!r}")
        self.column: Any = models.F(column)  # an expression once resolved
        self.key = key
        self.value_json = json.dumps(value)

    def resolve_expression(self, *args: Any, **kwargs: Any) -> JSONKeySet:
        resolved = super().resolve_expression(*args, **kwargs)
        resolved.column = self.column.resolve_expression(*args, **kwargs)
        return resolved

    def as_sqlite(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, list[Any]]:
        column, params = compiler.compile(self.column)
        return f"json_set({column}, %s, json(%s))", [*params, f"$.{self.key}", self.value_json]

    def as_postgresql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, list[Any]]:
        column, params = compiler.compile(self.column)
        sql = f"jsonb_set({column}, %s::text[], %s::jsonb)"
        return sql, [*params, f"{{{self.key}}}", self.value_json]
