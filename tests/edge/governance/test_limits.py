"""The limiter's rules on a clock the tests drive: windows, reservations, budgets, Retry-After."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from edge.config.policies import PolicyEntry, Settings, resolve
from edge.governance.limits import (
    INSUFFICIENT_QUOTA,
    MAX_RETRY_AFTER_S,
    RATE_LIMIT_EXCEEDED,
    Admission,
    Cell,
    Limiter,
    Refusal,
    UsedTokens,
    format_reset,
)

CELL = Cell("team-a", "tok-a", "m")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.wall = datetime(2025, 3, 31, 23, 59, 0, tzinfo=UTC)

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.wall += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def limiter(clock: Clock) -> Limiter:
    return Limiter(lambda: clock.now, lambda: clock.wall)


def entries(**settings: object) -> dict[str, PolicyEntry]:
    base = Settings(**settings, weight=1.0, priority_class="interactive")  # type: ignore[arg-type]
    return {"team-a": PolicyEntry("team-a", base, {}, {})}


def admit(limiter: Limiter, reserve: int = 0, cell: Cell = CELL, **settings: object):
    policies = entries(**settings)
    return limiter.admit(
        resolve(policies, cell.principal_ref, cell.token_ref, cell.model), cell, reserve
    )


def test_requests_per_minute_admits_exactly_n_then_frees_with_the_oldest(limiter, clock) -> None:
    outcomes = []
    for _ in range(5):
        outcomes.append(admit(limiter, requests_per_minute=3))
        clock.advance(10)
    assert [isinstance(o, Admission) for o in outcomes] == [True, True, True, False, False]
    refusal = outcomes[3]
    assert isinstance(refusal, Refusal)
    assert (refusal.code, refusal.key) == (RATE_LIMIT_EXCEEDED, "requests_per_minute")
    assert refusal.retry_after_s == pytest.approx(30)  # the first admission leaves at t+60
    assert outcomes[0].rate.remaining_requests == 2
    clock.advance(10)  # t = 60: the first admission has left the window
    assert isinstance(admit(limiter, requests_per_minute=3), Admission)


def test_tokens_per_minute_reserves_then_settles_to_real_usage(limiter, clock) -> None:
    first = admit(limiter, 600, tokens_per_minute=1000)
    assert isinstance(first, Admission)
    assert first.rate.remaining_tokens == 400
    refused = admit(limiter, 600, tokens_per_minute=1000)
    assert isinstance(refused, Refusal) and refused.key == "tokens_per_minute"
    assert refused.retry_after_s == pytest.approx(60)
    first.settle(100)  # the run used far less than it reserved
    assert isinstance(admit(limiter, 600, tokens_per_minute=1000), Admission)


def test_a_request_larger_than_the_minute_limit_is_refused_outright(limiter) -> None:
    refusal = admit(limiter, 2000, tokens_per_minute=1000)
    assert isinstance(refusal, Refusal)
    assert "Request too large" in refusal.message


def test_max_concurrent_counts_until_settled_and_settling_twice_is_once(limiter) -> None:
    held = [admit(limiter, max_concurrent=2) for _ in range(2)]
    assert isinstance(admit(limiter, max_concurrent=2), Refusal)
    held[0].settle(0)
    held[0].settle(0)
    assert limiter.in_flight("team-a") == 1
    assert isinstance(admit(limiter, max_concurrent=2), Admission)


def test_day_budget_from_loaded_usage_refuses_with_insufficient_quota(limiter, clock) -> None:
    limiter.load_usage([UsedTokens(clock.wall.date(), CELL, 900)])
    refusal = admit(limiter, 200, tokens_per_day=1000)
    assert isinstance(refusal, Refusal)
    assert (refusal.code, refusal.key) == (INSUFFICIENT_QUOTA, "tokens_per_day")
    assert refusal.retry_after_s == pytest.approx(60)  # midnight is 60 s away
    assert isinstance(admit(limiter, 100, tokens_per_day=1000), Admission)
    clock.advance(61)  # a new UTC day (and month): both budgets start again
    assert isinstance(admit(limiter, 900, tokens_per_day=1000, tokens_per_month=1000), Admission)


def test_month_budget_counts_every_day_of_the_month(limiter, clock) -> None:
    limiter.load_usage(
        [UsedTokens(date(2025, 3, 1), CELL, 500), UsedTokens(date(2025, 2, 28), CELL, 10**6)]
    )
    assert isinstance(admit(limiter, 600, tokens_per_month=1000), Refusal)
    assert isinstance(admit(limiter, 500, tokens_per_month=1000), Admission)


def test_retry_after_is_never_over_a_minute(limiter, clock) -> None:
    clock.wall = datetime(2025, 3, 15, 12, tzinfo=UTC)
    refusal = admit(limiter, 10, tokens_per_month=5)
    assert isinstance(refusal, Refusal)
    assert refusal.retry_after_s == MAX_RETRY_AFTER_S


def test_scopes_count_separately_and_overrides_beat_the_entry(limiter) -> None:
    entry = PolicyEntry(
        "team-a",
        Settings(requests_per_minute=1, weight=1.0, priority_class="interactive"),
        {"tok-b": Settings(requests_per_minute=2)},
        {},
    )
    policies = {"team-a": entry}
    other = Cell("team-a", "tok-b", "m")

    def go(cell: Cell):
        return limiter.admit(resolve(policies, *vars_of(cell)), cell, 0)

    assert isinstance(go(CELL), Admission)
    assert isinstance(go(CELL), Refusal)
    # tok-b's own limit counts tok-b's requests: 2 of them, though team-a's window is full.
    assert [isinstance(go(other), Admission) for _ in range(3)] == [True, True, False]


def vars_of(cell: Cell) -> tuple[str, str, str]:
    return cell.principal_ref, cell.token_ref, cell.model


def test_a_principal_without_policy_is_unlimited_and_counted(limiter) -> None:
    cell = Cell("nobody", "t", "m")
    held = [limiter.admit(resolve({}, *vars_of(cell)), cell, 10**9) for _ in range(100)]
    assert all(isinstance(h, Admission) for h in held)
    assert limiter.in_flight("nobody") == 100


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.0201, "21ms"), (1.5, "1.5s"), (59.25, "59.25s"), (60, "1m0s")]
)
def test_reset_durations_are_spelled_as_openai_does(seconds: float, text: str) -> None:
    assert format_reset(seconds) == text
