"""What a usage page covers: a period and filters, read from query parameters.

The rows list and the sums share it, so both cover the same rows and say so the same way. A
period starts where a rollup row starts (`edge/usage_rollup.py`): the short ones at the top of
an hour ("the last 24 hours" at 10:35 covers everything since 10:00 the day before), the long
ones at midnight UTC, read from the daily rollup.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlencode

from edge.usage_rollup import hour_of

PERIODS: dict[str, tuple[str, timedelta]] = {
    "1h": ("Last hour", timedelta(hours=1)),
    "24h": ("Last 24 hours", timedelta(days=1)),
    "7d": ("Last 7 days", timedelta(days=7)),
    "30d": ("Last 30 days", timedelta(days=30)),
}
# Periods read from the daily rollup; they start at midnight UTC.
DAY_PERIODS = frozenset({"7d", "30d"})
# The filters the sums know (the rollup's key); the rows list has a few more.
SUM_FILTERS = ("principal_ref", "token_ref", "model", "status")
MAX_FILTER_VALUE = 128  # the longest such column


class ScopeError(ValueError):
    """A query parameter that names no period or filter value; says which and why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True, slots=True)
class Scope:
    period: str  # a key of PERIODS, or "" for all the rows there are
    since: datetime | None
    filters: tuple[tuple[str, str], ...]  # (field, value) in SUM_FILTERS order

    @property
    def by_day(self) -> bool:
        """Whether the daily rollup covers it (all time does too)."""
        return self.since is None or self.period in DAY_PERIODS

    def label(self) -> str:
        """What the sums cover, in words: "Last 24 hours (since 2026-12-01 10:00 UTC) · …"."""
        parts = ["All time"]
        if self.since is not None:
            name = PERIODS[self.period][0]
            parts = [f"{name} (since {self.since:%Y-%m-%d %H:%M} UTC)"]
        parts += [f"{field} = {value or '(none)'}" for field, value in self.filters]
        return " · ".join(parts)

    def query(self, **changes: str | None) -> str:
        """This scope as a query string, with ``changes`` (None drops a parameter)."""
        params = {"period": self.period, **dict(self.filters)}
        for name, value in changes.items():
            if value is None:
                params.pop(name, None)
            else:
                params[name] = value
        return urlencode(
            {name: value for name, value in params.items() if name != "period" or value}
        )


def period_start(period: str, now: datetime) -> datetime | None:
    """The first hour of ``period`` (a key of PERIODS, "" for none) at ``now``."""
    if not period:
        return None
    if period not in PERIODS:
        choices = ", ".join(PERIODS)
        raise ScopeError("period", f"must be one of {choices} (or absent for all time)")
    start = hour_of(now - PERIODS[period][1])
    return start.replace(hour=0) if period in DAY_PERIODS else start


def scope_from(params: Mapping[str, str], now: datetime) -> Scope:
    """The scope ``params`` ask for; unknown parameters are refused, naming them."""
    unknown = sorted(set(params) - {"period", *SUM_FILTERS})
    if unknown:
        known = ", ".join(("period", *SUM_FILTERS))
        raise ScopeError(unknown[0], f"is not a parameter of the sums (they take {known})")
    period = params.get("period", "")
    filters = []
    for field in SUM_FILTERS:
        if field in params:
            value = params[field]
            if len(value) > MAX_FILTER_VALUE:
                raise ScopeError(field, f"longer than {MAX_FILTER_VALUE} characters")
            filters.append((field, value))
    return Scope(period, period_start(period, now), tuple(filters))
