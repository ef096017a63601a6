"""Budgets start from the day rollup: this month's tokens per cell, nothing older."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
import yaml
from asgiref.sync import sync_to_async

from edge.governance.limits import Cell, UsedTokens
from edge.governance.usage_load import used_this_month
from edge.runtime import get_runtime, install_runtime, runtime_installed
from edge.startup import ensure_runtime
from edge.usage_store import write_batch
from tests.e2e.harness import Tokens, echo_config
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


@pytest.mark.django_db(transaction=True)
async def test_a_runtime_built_on_the_event_loop_starts_its_budgets_from_past_usage(
    tmp_path, settings
) -> None:
    """A plain `daphne` start builds the runtime on its loop; the budgets still start from the
    usage metered before it."""
    today = datetime.now(UTC)
    await sync_to_async(write_batch)(
        [make_usage(0, prompt_tokens=30, completion_tokens=12, created_at=today)]
    )
    config = echo_config(Tokens(), 18000, 18001)
    config["openai"]["policies"] = [{"principal_ref": "team-a", "tokens_per_day": 100}]
    path = tmp_path / "edge.yaml"
    path.write_text(yaml.safe_dump(config))
    settings.IOP_CONFIG = str(path)
    previous = get_runtime() if runtime_installed() else None
    install_runtime(None)
    try:
        runtime = ensure_runtime()
        resolved = runtime.config.resolve_policy("team-a", "app-1", "m")
        assert runtime.limiter.remaining_budget(resolved) == {"tokens_per_day": 100 - 42}
    finally:
        install_runtime(previous)
