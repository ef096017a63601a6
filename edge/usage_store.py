"""Writing usage batches to the database, from one thread that keeps its connection open."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from django.db import DatabaseError, connection, transaction

from edge.models import UsageRecord
from edge.usage import Usage

_COLUMNS = Usage.__slots__
# One writer thread: batches are written in order, and its connection is reused across batches.
_writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="usage-writer")


async def write_usage(batch: list[Usage]) -> None:
    await asyncio.get_running_loop().run_in_executor(_writer, _write, batch)


def _write(batch: list[Usage]) -> None:
    # A plain executemany: building model instances costs more than the insert itself at
    # thousands of rows a second (docs/benchmarks.md).
    adapt_time = connection.ops.adapt_datetimefield_value
    rows = [
        tuple(adapt_time(u.created_at) if c == "created_at" else getattr(u, c) for c in _COLUMNS)
        for u in batch
    ]
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.executemany(_insert_sql(), rows)
    except DatabaseError:
        connection.close()  # reconnect on the next batch, e.g. after a database restart
        raise


def _insert_sql() -> str:
    quote = connection.ops.quote_name
    fields = {field.name: field for field in UsageRecord._meta.concrete_fields}
    columns = ", ".join(quote(fields[name].column) for name in _COLUMNS)
    placeholders = ", ".join(["%s"] * len(_COLUMNS))
    return f"INSERT INTO {quote(UsageRecord._meta.db_table)} ({columns}) VALUES ({placeholders})"
