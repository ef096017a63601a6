"""The budgets' starting point: tokens already used this UTC month, read from the day rollup."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime

from django.db.models import F, Sum

from edge.governance.limits import Cell, Limiter, UsedTokens
from edge.models import UsageDayRollup


def used_this_month(today: date) -> Iterator[UsedTokens]:
    rows = (
        UsageDayRollup.objects.filter(day__gte=today.replace(day=1))
        .values("day", "principal_ref", "token_ref", "model")
        .annotate(tokens=Sum(F("prompt_tokens") + F("completion_tokens")))
    )
    for row in rows.iterator():
        cell = Cell(row["principal_ref"], row["token_ref"], row["model"])
        yield UsedTokens(row["day"], cell, int(row["tokens"] or 0))


def load_budget_usage(limiter: Limiter) -> None:
    """Give ``limiter`` the usage metered before this process started (an Edge restart keeps
    every budget where it was)."""
    limiter.load_usage(used_this_month(datetime.now(UTC).date()))
