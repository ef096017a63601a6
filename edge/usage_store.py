"""Writing usage batches to the database, from one thread that keeps its connection open.

Each batch goes in with its sums, hourly and daily (`edge/usage_rollup.py`), in one transaction:
the sums the admin reads are the rows' sums, to the row.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from django.db import DatabaseError, connection, transaction
from django.db.backends.utils import CursorWrapper

from edge.models import UsageDayRollup, UsageRecord, UsageRollup, UsageSums
from edge.usage import Usage
from edge.usage_rollup import (
    DAY_KEY,
    HOUR_KEY,
    REFS,
    SUM_FIELDS,
    DayKey,
    RollupKey,
    Totals,
    per_day,
    rollup,
)

_COLUMNS = Usage.__slots__
# One writer thread: batches are written in order, and its connection is reused across batches.
_writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="usage-writer")


async def write_usage(batch: list[Usage]) -> None:
    await asyncio.get_running_loop().run_in_executor(_writer, write_batch, batch)


def write_batch(batch: list[Usage]) -> None:
    """Store ``batch`` and add it to the rollup, in one transaction (on the caller's thread)."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.executemany(_insert_sql(), _usage_rows(batch))
            add_to_rollup(cursor, batch)
    except DatabaseError:
        connection.close()  # reconnect on the next batch, e.g. after a database restart
        raise


def add_to_rollup(cursor: CursorWrapper, batch: list[Usage]) -> None:
    """Add ``batch``'s sums to both rollups, inside the caller's transaction."""
    adapt_time = connection.ops.adapt_datetimefield_value
    adapt_date = connection.ops.adapt_datefield_value
    hourly = rollup(batch)
    # In key order: two writers upserting the same keys take their row locks in one order.
    cursor.executemany(
        _upsert_sql(UsageRollup, ("hour", "day"), HOUR_KEY),
        [
            (adapt_time(key.hour), adapt_date(key.day), *_refs(key), *_sums(totals))
            for key, totals in sorted(hourly.items())
        ],
    )
    cursor.executemany(
        _upsert_sql(UsageDayRollup, ("day",), DAY_KEY),
        [
            (adapt_date(key.day), *_refs(key), *_sums(totals))
            for key, totals in sorted(per_day(hourly).items())
        ],
    )


def _refs(key: RollupKey | DayKey) -> tuple[str, ...]:
    return (key.principal_ref, key.token_ref, key.model, key.status)


def _sums(totals: Totals) -> tuple[int, ...]:
    return (totals.requests, totals.prompt_tokens, totals.completion_tokens, *totals.latency)


def _usage_rows(batch: list[Usage]) -> list[tuple]:
    # A plain executemany: building model instances costs more than the insert itself at
    # thousands of rows a second (docs/benchmarks.md).
    adapt_time = connection.ops.adapt_datetimefield_value
    return [
        tuple(adapt_time(u.created_at) if c == "created_at" else getattr(u, c) for c in _COLUMNS)
        for u in batch
    ]


def _insert_sql() -> str:
    quote = connection.ops.quote_name
    fields = {field.name: field for field in UsageRecord._meta.concrete_fields}
    columns = ", ".join(quote(fields[name].column) for name in _COLUMNS)
    placeholders = ", ".join(["%s"] * len(_COLUMNS))
    return f"INSERT INTO {quote(UsageRecord._meta.db_table)} ({columns}) VALUES ({placeholders})"


def _upsert_sql(model: type[UsageSums], time_columns: tuple[str, ...], key: tuple[str, ...]) -> str:
    """Insert a rollup row or add to the one with its key (SQLite ≥ 3.24 and PostgreSQL alike)."""
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    columns = (*time_columns, *REFS, *SUM_FIELDS)
    additions = ", ".join(
        f"{quote(name)} = {table}.{quote(name)} + excluded.{quote(name)}" for name in SUM_FIELDS
    )
    return (
        f"INSERT INTO {table} ({', '.join(quote(name) for name in columns)}) "
        f"VALUES ({', '.join(['%s'] * len(columns))}) "
        f"ON CONFLICT ({', '.join(quote(name) for name in key)}) DO UPDATE SET {additions}"
    )
