"""The rollup's arithmetic: keys per hour, latency buckets and the p50 they estimate."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest

from edge.usage import Usage
from edge.usage_rollup import (
    LATENCY_BOUNDS_MS,
    LATENCY_FIELDS,
    DayKey,
    RollupKey,
    SumRow,
    Totals,
    estimate_percentile,
    group_sums,
    hour_of,
    latency_bucket,
    per_day,
    rollup,
    total,
)

NOON = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def make_usage(minute: int = 0, status: str = "ok", total_ms: float = 3.0, **fields) -> Usage:
    defaults = {"principal_ref": "team-a", "token_ref": "app-1", "model": "m"}
    return Usage(
        request_id=f"r{minute}",
        status=status,
        total_ms=total_ms,
        created_at=NOON + timedelta(minutes=minute),
        prompt_tokens=2,
        completion_tokens=3,
        **{**defaults, **fields},
    )


def test_it_sums_a_batch_per_hour_principal_token_model_and_status():
    batch = [
        make_usage(1),
        make_usage(59),
        make_usage(61),  # the next hour
        make_usage(2, status="upstream_error"),
        make_usage(3, token_ref="app-2"),
    ]

    sums = rollup(batch)

    key = RollupKey(NOON, "team-a", "app-1", "m", "ok")
    assert set(sums) == {
        key,
        RollupKey(NOON + timedelta(hours=1), "team-a", "app-1", "m", "ok"),
        RollupKey(NOON, "team-a", "app-1", "m", "upstream_error"),
        RollupKey(NOON, "team-a", "app-2", "m", "ok"),
    }
    assert (sums[key].requests, sums[key].prompt_tokens, sums[key].completion_tokens) == (2, 4, 6)
    assert sums[key].latency[0] == 2 and sum(sums[key].latency) == 2
    assert sums[RollupKey(NOON, "team-a", "app-1", "m", "upstream_error")].errors == 1
    assert key.day == date(2026, 12, 1)


def test_the_hour_of_a_time_is_its_utc_hour():
    two_hours_east = timezone(timedelta(hours=2))
    moment = datetime(2026, 12, 2, 1, 30, 15, 500, tzinfo=two_hours_east)

    assert hour_of(moment) == datetime(2026, 12, 1, 23, tzinfo=UTC)


@pytest.mark.parametrize(
    ("total_ms", "bucket"),
    [(0, 0), (5, 0), (5.01, 1), (10, 1), (999, 7), (120_000, 13), (120_001, 14), (1e9, 14)],
)
def test_a_latency_lands_in_the_bucket_its_bound_includes(total_ms, bucket):
    assert latency_bucket(total_ms) == bucket


def test_there_is_one_column_per_bucket_and_one_above_the_last_bound():
    assert len(LATENCY_FIELDS) == len(LATENCY_BOUNDS_MS) + 1
    assert LATENCY_FIELDS[0] == "latency_le_5ms"
    assert LATENCY_FIELDS[-1] == "latency_gt_120000ms"


def counts(**by_bucket: int) -> list[int]:
    values = [0] * len(LATENCY_FIELDS)
    for name, count in by_bucket.items():
        values[LATENCY_FIELDS.index(name)] = count
    return values


@pytest.mark.parametrize(
    ("latency", "p50"),
    [
        (counts(), None),
        (counts(latency_le_5ms=1), 2.5),  # halfway into the first bucket, from 0
        (counts(latency_le_100ms=4), 75.0),  # 50..100 ms, half of it
        (counts(latency_le_10ms=1, latency_le_1000ms=3), 500 + 500 / 3),  # rank 2 of 4
        (counts(latency_le_5ms=2, latency_le_250ms=2), 5.0),  # the rank ends on a bound
        (counts(latency_gt_120000ms=3), 120_000.0),  # above the last bound: that bound
    ],
)
def test_the_p50_is_interpolated_within_its_bucket(latency, p50):
    assert estimate_percentile(latency, 0.5) == p50


def test_totals_merge_and_derive_rates():
    first = Totals(requests=3, errors=1, prompt_tokens=10, completion_tokens=5)
    first.latency[2] = 3
    second = Totals(requests=1, errors=0, prompt_tokens=1, completion_tokens=1)
    second.latency[2] = 1

    first.merge(second)

    assert (first.requests, first.errors, first.total_tokens) == (4, 1, 17)
    assert first.error_rate == 0.25
    assert first.latency[2] == 4
    assert Totals().error_rate is None and Totals().p50_ms is None


def test_the_hours_add_up_to_days():
    # Noon, 23:00 the same day, and midnight after it.
    batch = [make_usage(0), make_usage(60 * 11), make_usage(60 * 12, status="rate_limited")]

    days = per_day(rollup(batch))

    assert set(days) == {
        DayKey(date(2026, 12, 1), "team-a", "app-1", "m", "ok"),
        DayKey(date(2026, 12, 2), "team-a", "app-1", "m", "rate_limited"),
    }
    assert days[DayKey(date(2026, 12, 1), "team-a", "app-1", "m", "ok")].requests == 2
    assert days[DayKey(date(2026, 12, 2), "team-a", "app-1", "m", "rate_limited")].errors == 1


def sum_row(tokens: int, requests: int = 1, **keys: object) -> SumRow:
    return SumRow(keys, Totals(requests=requests, prompt_tokens=tokens))


def test_sums_group_by_keys_days_newest_first_and_the_rest_by_tokens():
    rows = [
        sum_row(5, day=date(2026, 12, 1), model="a"),
        sum_row(7, day=date(2026, 12, 2), model="a"),
        sum_row(9, day=date(2026, 12, 1), model="b"),
    ]

    by_day = group_sums(rows, ["day"])
    by_model = group_sums(rows, ["model"])

    assert [(key, sums.total_tokens) for key, sums in by_day] == [
        ((date(2026, 12, 2),), 7),
        ((date(2026, 12, 1),), 14),
    ]
    assert [(key, sums.total_tokens) for key, sums in by_model] == [(("a",), 12), (("b",), 9)]
    assert total(rows).total_tokens == 21


def test_cancelled_runs_are_no_errors():
    sums = rollup([make_usage(status="cancelled"), make_usage(status="ok")])

    assert sum(totals.errors for totals in sums.values()) == 0
    assert hour_of(NOON) == NOON
