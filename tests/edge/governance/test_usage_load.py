"""Budgets start from the day rollup: this month's tokens per cell, nothing older."""

from __future__ import annotations

from datetime import date, timedelta

import pytest

from edge.governance.limits import Cell, UsedTokens
from edge.governance.usage_load import used_this_month
from edge.usage_store import write_batch
from tests.edge.test_usage_store import NOON, make_usage


@pytest.mark.django_db
def test_used_this_month_sums_each_cell_per_day_and_skips_last_month() -> None:
    write_batch(
        [
            make_usage(0, prompt_tokens=10, completion_tokens=5),
            make_usage(1, prompt_tokens=1, completion_tokens=1, status="rate_limit_exceeded"),
            make_usage(2, prompt_tokens=7, completion_tokens=0, model="other"),
            make_usage(
                3, prompt_tokens=100, completion_tokens=0, created_at=NOON - timedelta(days=1)
            ),
        ]
    )

    rows = sorted(used_this_month(NOON.date()), key=lambda row: row.cell.model)

    assert rows == [
        UsedTokens(date(2026, 12, 1), Cell("team-a", "app-1", "m"), 17),
        UsedTokens(date(2026, 12, 1), Cell("team-a", "app-1", "other"), 7),
    ]
