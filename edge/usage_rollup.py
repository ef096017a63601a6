"""Usage sums kept per hour and per day: the rollups' keys, latency buckets, what they add up to.

The usage writer adds every batch to both rollups in the transaction that stores its rows
(`edge/usage_store.py`); the admin's sums read a rollup, never the rows: periods of hours the
hourly one, longer ones the daily one, some thirty times smaller. Latency is kept as counts per
bucket, Prometheus-style, so a p50 over any set of rollup rows is an estimate within one bucket.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Protocol

# Upper bounds (ms, inclusive) of the latency buckets; one more bucket holds what is slower.
LATENCY_BOUNDS_MS: tuple[int, ...] = (
    5,
    10,
    25,
    50,
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    30_000,
    60_000,
    120_000,
)
LATENCY_FIELDS: tuple[str, ...] = (
    *(f"latency_le_{bound}ms" for bound in LATENCY_BOUNDS_MS),
    f"latency_gt_{LATENCY_BOUNDS_MS[-1]}ms",
)
# Statuses that are no error: answered, or given up by the caller before the answer.
NOT_ERRORS = frozenset({"ok", "cancelled"})
# The rollups' keys, in the order of their unique constraints.
REFS = ("principal_ref", "token_ref", "model", "status")
HOUR_KEY = ("hour", *REFS)
DAY_KEY = ("day", *REFS)
SUM_FIELDS = ("requests", "prompt_tokens", "completion_tokens", *LATENCY_FIELDS)


class Metered(Protocol):
    """What the rollup reads of a usage record (`edge.usage.Usage` has it)."""

    created_at: datetime
    principal_ref: str
    token_ref: str
    model: str
    status: str
    prompt_tokens: int
    completion_tokens: int
    total_ms: float


@dataclass(frozen=True, slots=True, order=True)
class RollupKey:
    """A row of the hourly rollup; ``day`` is its UTC day, kept beside it for sums per day."""

    hour: datetime
    principal_ref: str
    token_ref: str
    model: str
    status: str

    @property
    def day(self) -> date:
        return self.hour.date()


@dataclass(frozen=True, slots=True, order=True)
class DayKey:
    """A row of the daily rollup."""

    day: date
    principal_ref: str
    token_ref: str
    model: str
    status: str


@dataclass(slots=True)
class Totals:
    """Requests, tokens and latency counts of a set of usage records."""

    requests: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency: list[int] = field(default_factory=lambda: [0] * len(LATENCY_FIELDS))

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def error_rate(self) -> float | None:
        return self.errors / self.requests if self.requests else None

    @property
    def p50_ms(self) -> float | None:
        return estimate_percentile(self.latency, 0.5)

    def merge(self, other: Totals) -> None:
        self.requests += other.requests
        self.errors += other.errors
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        for index, count in enumerate(other.latency):
            self.latency[index] += count


def hour_of(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def latency_bucket(total_ms: float) -> int:
    return bisect_left(LATENCY_BOUNDS_MS, total_ms)  # the first bound >= total_ms


def rollup(records: Iterable[Metered]) -> dict[RollupKey, Totals]:
    """The rollup rows a batch of usage records adds to, with what it adds."""
    # Keyed by the hour's number while adding: the writer runs this on thousands of rows a
    # second, and one datetime per key instead of one per record is most of its cost.
    rows: dict[tuple[int, str, str, str, str], Totals] = {}
    for record in records:
        key = (
            int(record.created_at.timestamp()) // 3600,
            record.principal_ref,
            record.token_ref,
            record.model,
            record.status,
        )
        totals = rows.get(key)
        if totals is None:
            totals = rows[key] = Totals()
        totals.requests += 1
        totals.errors += record.status not in NOT_ERRORS
        totals.prompt_tokens += record.prompt_tokens
        totals.completion_tokens += record.completion_tokens
        totals.latency[bisect_left(LATENCY_BOUNDS_MS, record.total_ms)] += 1
    return {
        RollupKey(datetime.fromtimestamp(hour * 3600, UTC), *refs): totals
        for (hour, *refs), totals in rows.items()
    }


def per_day(hourly: dict[RollupKey, Totals]) -> dict[DayKey, Totals]:
    """The daily rollup rows the hourly ones add to."""
    days: dict[DayKey, Totals] = {}
    for key, totals in hourly.items():
        day = DayKey(key.day, key.principal_ref, key.token_ref, key.model, key.status)
        if day not in days:
            days[day] = Totals()
        days[day].merge(totals)
    return days


def estimate_percentile(counts: Sequence[int], quantile: float) -> float | None:
    """The ``quantile`` (0..1) of latency buckets, interpolated linearly inside its bucket.

    None without any count; in the open bucket above the last bound, that bound (what is known).
    """
    total = sum(counts)
    if not total:
        return None
    rank = quantile * total
    below = 0
    for index, count in enumerate(counts):
        if count and below + count >= rank:
            if index == len(LATENCY_BOUNDS_MS):
                return float(LATENCY_BOUNDS_MS[-1])
            lower = LATENCY_BOUNDS_MS[index - 1] if index else 0
            upper = LATENCY_BOUNDS_MS[index]
            return lower + (upper - lower) * (rank - below) / count
        below += count
    return float(LATENCY_BOUNDS_MS[-1])  # unreachable: the counts add up to total


# The finest grain the sums read from a rollup: per day, principal, token_ref, model.
GRAIN = ("day", "principal_ref", "token_ref", "model")


@dataclass(frozen=True, slots=True)
class SumRow:
    """The sums of one group: ``keys`` holds its values of some GRAIN names."""

    keys: Mapping[str, object]
    totals: Totals


def group_sums(rows: Iterable[SumRow], keys: Sequence[str]) -> list[tuple[tuple, Totals]]:
    """``rows`` summed per ``keys``: days newest first, the rest by tokens, then requests."""
    groups: dict[tuple, Totals] = {}
    for row in rows:
        key = tuple(row.keys[name] for name in keys)
        if key not in groups:
            groups[key] = Totals()
        groups[key].merge(row.totals)
    if "day" in keys:
        return sorted(groups.items(), key=lambda item: item[0], reverse=True)
    return sorted(
        groups.items(), key=lambda item: (-item[1].total_tokens, -item[1].requests, item[0])
    )


def total(rows: Iterable[SumRow]) -> Totals:
    result = Totals()
    for row in rows:
        result.merge(row.totals)
    return result
