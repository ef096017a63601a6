"""Usage sums read from the rollups, and usage as CSV: the database side of the usage pages."""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import datetime

from asgiref.sync import sync_to_async
from django.core.cache import cache
from django.db.models import Q, QuerySet, Sum

from edge.models import UsageDayRollup, UsageRecord, UsageRollup
from edge.usage_rollup import GRAIN, LATENCY_FIELDS, NOT_ERRORS, SumRow, Totals
from edge.usage_scope import Scope

# Aliases unlike the field names: Django refuses an annotation named like a field.
_SUMS = {
    "n_requests": Sum("requests"),
    "n_errors": Sum("requests", filter=~Q(status__in=NOT_ERRORS)),
    "n_prompt": Sum("prompt_tokens"),
    "n_completion": Sum("completion_tokens"),
    **{f"n_{name}": Sum(name) for name in LATENCY_FIELDS},
}
ROWS_PER_BATCH = 2_000
_FORMULA_STARTS = frozenset("=+-@\t\r")
# Filter choices: the busiest values of the daily rollup, read again at most once a minute.
MAX_CHOICES = 50
CHOICES_TTL_S = 60

SUMS_CSV_COLUMNS = (
    *GRAIN,
    "requests",
    "errors",
    "error_rate",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "p50_ms",
)
ROWS_CSV_COLUMNS = (
    "created_at",
    "request_id",
    "principal_ref",
    "token_ref",
    "alias",
    "model",
    "endpoint",
    "provider",
    "node",
    "context_class",
    "status",
    "prompt_tokens",
    "completion_tokens",
    "queue_ms",
    "total_ms",
    "attempts",
    "providers_tried",
)


def rollup_rows(scope: Scope) -> QuerySet[UsageRollup] | QuerySet[UsageDayRollup]:
    """The rollup rows of ``scope``: hourly for periods of hours, daily for the rest."""
    filters = dict(scope.filters)
    if scope.since is None:
        return UsageDayRollup.objects.filter(**filters)
    if scope.by_day:
        return UsageDayRollup.objects.filter(day__gte=scope.since.date(), **filters)
    return UsageRollup.objects.filter(hour__gte=scope.since, **filters)


def sum_rows(scope: Scope, keys: Sequence[str] = GRAIN) -> list[SumRow]:
    """The scope's sums per ``keys`` (names in GRAIN): one grouped query on a rollup."""
    groups = rollup_rows(scope).values(*keys).annotate(**_SUMS).order_by()
    return [
        SumRow(
            {name: group[name] for name in keys},
            Totals(
                requests=group["n_requests"],
                errors=group["n_errors"] or 0,  # NULL when every row of the group is no error
                prompt_tokens=group["n_prompt"],
                completion_tokens=group["n_completion"],
                latency=[group[f"n_{name}"] for name in LATENCY_FIELDS],
            ),
        )
        for group in groups
    ]


def filter_choices(field: str) -> list[str]:
    """Up to MAX_CHOICES values of ``field`` in the daily rollup (the busiest), in order.

    Kept for CHOICES_TTL_S: reading them scans the whole rollup, and every usage page shows
    them; a token seen for the first time is offered within that time.
    """
    key = f"edge.usage.choices.{field}"
    choices = cache.get(key)
    if choices is None:
        values = (
            UsageDayRollup.objects.values(field)
            .annotate(n=Sum("requests"))
            .order_by("-n", field)
            .values_list(field, flat=True)
        )
        choices = sorted(values[:MAX_CHOICES])
        cache.set(key, choices, CHOICES_TTL_S)
    return choices


def sums_csv(rows: Iterable[SumRow]) -> bytes:
    ordered = sorted(rows, key=lambda row: tuple(row.keys[name] for name in GRAIN))
    return _csv_lines([SUMS_CSV_COLUMNS, *(_sum_cells(row) for row in ordered)])


def _sum_cells(row: SumRow) -> tuple[object, ...]:
    totals = row.totals
    return (
        *(str(row.keys[name]) for name in GRAIN),
        totals.requests,
        totals.errors,
        _fixed(totals.error_rate, 4),
        totals.prompt_tokens,
        totals.completion_tokens,
        totals.total_tokens,
        _fixed(totals.p50_ms, 1),
    )


async def rows_csv(rows: QuerySet[UsageRecord]) -> AsyncIterator[bytes]:
    """Every row of ``rows`` (newest first) as CSV, a batch at a time.

    Each batch is one short indexed query after the last row sent (no OFFSET, no cursor held
    open), read and formatted on the request's thread; memory stays flat whatever the count.
    """
    yield _csv_lines([ROWS_CSV_COLUMNS])
    after: tuple[datetime, int] | None = None
    while True:
        chunk, after = await sync_to_async(_rows_batch)(rows, after)
        if not chunk:
            return
        yield chunk


def _rows_batch(
    rows: QuerySet[UsageRecord], after: tuple[datetime, int] | None
) -> tuple[bytes, tuple[datetime, int] | None]:
    page = rows.order_by("-created_at", "-id")
    if after is not None:
        created_at, row_id = after
        # The range alone lets the index serve it; the OR only settles rows sharing a time.
        page = page.filter(created_at__lte=created_at).filter(
            Q(created_at__lt=created_at) | Q(id__lt=row_id)
        )
    batch = list(page.values_list("id", *ROWS_CSV_COLUMNS)[:ROWS_PER_BATCH])
    if not batch:
        return b"", after
    last = batch[-1]
    return _csv_lines(_row_cells(row[1:]) for row in batch), (last[1], last[0])


def _row_cells(values: Sequence[object]) -> list[object]:
    created_at = values[0]
    assert isinstance(created_at, datetime)
    return [created_at.isoformat(), *values[1:]]


def _csv_lines(rows: Iterable[Sequence[object]]) -> bytes:
    out = io.StringIO()
    csv.writer(out).writerows([_inert(cell) for cell in row] for row in rows)
    return out.getvalue().encode()


def _inert(cell: object) -> object:
    """A text cell a spreadsheet would run as a formula, quoted (OWASP's CSV injection rule):
    model names and request ids come from callers."""
    if isinstance(cell, str) and cell[:1] in _FORMULA_STARTS:
        return f"'{cell}"
    return cell


def _fixed(value: float | None, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"
