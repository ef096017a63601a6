"""The usage sums as an operator reads them: tables per principal, token_ref, model and day.

Numbers are formatted here (thousands separators, a rate in percent, the p50 marked as the
estimate it is), so the page and its tests see the same text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from edge.usage_rollup import SumRow, Totals, group_sums, total
from edge.usage_scope import PERIODS, Scope

NO_VALUE = "\u2013"  # an en dash: no requests, no rate
# Rows a table shows at most: model names of refused requests are whatever callers sent, and
# days pile up; the total still covers every group, and the CSV lists them all.
MAX_TABLE_ROWS = 100
HEADERS = ("requests", "errors", "error rate", "prompt", "completion", "total tokens", "p50")


@dataclass(frozen=True, slots=True)
class Cell:
    text: str
    query: str = ""  # the sums narrowed to this value, when the cell is a key


@dataclass(frozen=True, slots=True)
class Row:
    keys: list[Cell]
    numbers: list[str]


@dataclass(frozen=True, slots=True)
class Table:
    id: str
    caption: str
    key_headers: tuple[str, ...]
    rows: list[Row]
    total_numbers: list[str]
    more: int = 0  # groups past MAX_TABLE_ROWS, left to the CSV
    number_headers: tuple[str, ...] = HEADERS

    @property
    def total_keys(self) -> list[str]:
        return ["Total", *([""] * (len(self.key_headers) - 1))]


@dataclass(frozen=True, slots=True)
class Choice:
    label: str
    query: str
    selected: bool


@dataclass(frozen=True, slots=True)
class FilterLinks:
    """One filter of the sums page, as the admin's filter sidebar shows it."""

    title: str
    choices: list[Choice]


# (table id, caption, the GRAIN names it groups by, their headers)
LAYOUT = (
    ("usage-sums-principal", "Per principal", ("principal_ref",), ("principal",)),
    (
        "usage-sums-token",
        "Per token_ref",
        ("principal_ref", "token_ref"),
        ("principal", "token_ref"),
    ),
    ("usage-sums-model", "Per model", ("model",), ("model",)),
    ("usage-sums-day", "Per day (UTC)", ("day",), ("day",)),
)


def sums_tables(
    by_token_model: Sequence[SumRow], by_day: Sequence[SumRow], scope: Scope
) -> list[Table]:
    """The four tables, from sums per (principal, token_ref, model) and per day."""
    totals = number_cells(total(by_day))
    tables = []
    for table_id, caption, keys, headers in LAYOUT:
        groups = group_sums(by_day if keys == ("day",) else by_token_model, keys)
        rows = [
            Row(_key_cells(keys, values, scope), number_cells(sums))
            for values, sums in groups[:MAX_TABLE_ROWS]
        ]
        more = max(0, len(groups) - MAX_TABLE_ROWS)
        tables.append(Table(table_id, caption, headers, rows, totals, more))
    return tables


def filter_links(scope: Scope, choices: Mapping[str, Sequence[str]]) -> list[FilterLinks]:
    """Period and value filters as links that change one parameter of ``scope`` each."""
    selected = dict(scope.filters)
    period = FilterLinks(
        "period",
        [Choice("All time", scope.query(period=None), not scope.period)]
        + [
            Choice(name, scope.query(period=key), key == scope.period)
            for key, (name, _) in PERIODS.items()
        ],
    )
    return [
        period,
        *(
            FilterLinks(
                field,
                [Choice("All", scope.query(**{field: None}), field not in selected)]
                + [
                    Choice(
                        _key_text(field, value),
                        scope.query(**{field: value}),
                        selected.get(field) == value,
                    )
                    for value in values
                ],
            )
            for field, values in choices.items()
        ),
    ]


def _key_cells(keys: Sequence[str], values: Sequence[object], scope: Scope) -> list[Cell]:
    return [
        Cell(str(value))
        if name == "day"
        else Cell(_key_text(name, str(value)), scope.query(**{name: str(value)}))
        for name, value in zip(keys, values, strict=True)
    ]


def _key_text(field: str, value: str) -> str:
    return value or ("(anonymous)" if field == "principal_ref" else "(none)")


def number_cells(totals: Totals) -> list[str]:
    return [
        f"{totals.requests:,}",
        f"{totals.errors:,}",
        percent(totals.error_rate),
        f"{totals.prompt_tokens:,}",
        f"{totals.completion_tokens:,}",
        f"{totals.total_tokens:,}",
        milliseconds(totals.p50_ms),
    ]


def percent(rate: float | None) -> str:
    return NO_VALUE if rate is None else f"{rate * 100:.1f} %"


def milliseconds(value: float | None) -> str:
    """An estimated latency: "≈ 2.5 ms" below ten, "≈ 1,250 ms" above."""
    if value is None:
        return NO_VALUE
    return f"≈ {value:.1f} ms" if value < 10 else f"≈ {value:,.0f} ms"
