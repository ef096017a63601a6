"""What the usage pages cover and how their sums read: scopes, labels, tables, formatting."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from edge import usage_tables
from edge.usage_rollup import SumRow, Totals
from edge.usage_scope import Scope, ScopeError, period_start, scope_from
from edge.usage_tables import (
    NO_VALUE,
    filter_links,
    milliseconds,
    number_cells,
    percent,
    sums_tables,
)

NOW = datetime(2026, 12, 1, 10, 35, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("period", "start"),
    [
        ("", None),
        ("1h", datetime(2026, 12, 1, 9, tzinfo=UTC)),
        ("24h", datetime(2026, 11, 30, 10, tzinfo=UTC)),
        ("7d", datetime(2026, 11, 24, tzinfo=UTC)),  # days start at midnight
        ("30d", datetime(2026, 11, 1, tzinfo=UTC)),
    ],
)
def test_a_period_starts_where_a_rollup_row_starts(period, start):
    assert period_start(period, NOW) == start


def test_a_scope_reads_the_period_and_the_filters_it_knows():
    scope = scope_from({"token_ref": "app-2", "period": "24h", "principal_ref": ""}, NOW)

    assert scope.filters == (("principal_ref", ""), ("token_ref", "app-2"))
    assert not scope.by_day
    assert scope.label() == (
        "Last 24 hours (since 2026-11-30 10:00 UTC) · principal_ref = (none) · token_ref = app-2"
    )
    assert scope.query() == "period=24h&principal_ref=&token_ref=app-2"
    assert scope.query(period=None, model="m") == "principal_ref=&token_ref=app-2&model=m"
    assert scope_from({}, NOW).label() == "All time" and scope_from({}, NOW).by_day


@pytest.mark.parametrize(
    ("params", "field", "message"),
    [
        ({"period": "2d"}, "period", "must be one of 1h, 24h, 7d, 30d"),
        ({"provider": "p1"}, "provider", "is not a parameter of the sums"),
        ({"model": "m" * 129}, "model", "longer than 128 characters"),
    ],
)
def test_a_bad_parameter_is_refused_by_name(params, field, message):
    with pytest.raises(ScopeError) as refused:
        scope_from(params, NOW)

    assert refused.value.field == field
    assert str(refused.value).startswith(f"{field}: {message}")


def sums(requests: int, errors: int = 0, tokens: int = 0, latency_bucket: int = 3) -> Totals:
    totals = Totals(requests=requests, errors=errors, prompt_tokens=tokens, completion_tokens=1)
    totals.latency[latency_bucket] = requests
    return totals


def test_the_tables_group_total_and_link_each_key_to_the_narrower_sums():
    by_token_model = [
        SumRow({"principal_ref": "", "token_ref": "", "model": "m"}, sums(2, tokens=1_000)),
        SumRow({"principal_ref": "team-a", "token_ref": "app-1", "model": "m"}, sums(1, 1, 5)),
    ]
    by_day = [SumRow({"day": date(2026, 12, 1)}, sums(3, 1, 1_005))]
    scope = Scope("24h", datetime(2026, 11, 30, 10, tzinfo=UTC), ())

    principal, token, model, day = sums_tables(by_token_model, by_day, scope)

    assert [cell.text for cell in principal.rows[0].keys] == ["(anonymous)"]
    assert principal.rows[0].keys[0].query == "period=24h&principal_ref="
    assert [cell.text for cell in token.rows[1].keys] == ["team-a", "app-1"]
    assert token.rows[1].numbers[:3] == ["1", "1", "100.0 %"]
    assert model.rows[0].numbers[:2] == ["3", "1"]
    assert day.rows[0].keys[0].query == ""  # a day is no filter of the sums
    assert day.total_keys == ["Total"] and token.total_keys == ["Total", ""]
    assert day.total_numbers == ["3", "1", "33.3 %", "1,005", "1", "1,006", "≈ 38 ms"]


def test_a_table_shows_at_most_so_many_groups_and_counts_the_rest(monkeypatch):
    monkeypatch.setattr(usage_tables, "MAX_TABLE_ROWS", 2)
    models = [
        SumRow({"principal_ref": "a", "token_ref": "t", "model": f"junk-{i}"}, sums(1))
        for i in range(5)
    ]

    model_table = sums_tables(models, [], Scope("", None, ()))[2]

    assert len(model_table.rows) == 2 and model_table.more == 3


def test_the_filter_links_change_one_parameter_each():
    scope = Scope("7d", datetime(2026, 11, 24, tzinfo=UTC), (("model", "m"),))

    period, model = filter_links(scope, {"model": ["m", "n"]})

    assert [(c.label, c.query, c.selected) for c in period.choices][:3] == [
        ("All time", "model=m", False),
        ("Last hour", "period=1h&model=m", False),
        ("Last 24 hours", "period=24h&model=m", False),
    ]
    assert [(c.label, c.query, c.selected) for c in model.choices] == [
        ("All", "period=7d", False),
        ("m", "period=7d&model=m", True),
        ("n", "period=7d&model=n", False),
    ]


@pytest.mark.parametrize(
    ("value", "text"),
    [(None, NO_VALUE), (2.5, "≈ 2.5 ms"), (37.5, "≈ 38 ms"), (1250.0, "≈ 1,250 ms")],
)
def test_a_latency_reads_as_the_estimate_it_is(value, text):
    assert milliseconds(value) == text


def test_numbers_have_thousands_separators_and_rates_a_percent():
    assert number_cells(sums(1_234_567, 12, 9_000_000))[:4] == [
        "1,234,567",
        "12",
        "0.0 %",
        "9,000,000",
    ]
    assert percent(None) == NO_VALUE and percent(0.0125) == "1.2 %"
