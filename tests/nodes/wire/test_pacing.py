"""Keep-alive beats stay on their grid however late the loop wakes them (nodes.wire.pacing)."""

from __future__ import annotations

import asyncio

import pytest

from nodes.wire import pacing
from nodes.wire.pacing import beats, next_due


def test_a_beat_on_time_is_followed_one_interval_on() -> None:
    assert next_due(10.0, 2.0, now=10.1) == 12.0


def test_a_late_beat_does_not_move_the_phase() -> None:
    # Woken at 11.5 for the beat due at 10.0: the next is still on the grid 10, 12, 14...
    assert next_due(10.0, 2.0, now=11.5) == 12.0


def test_beats_missed_while_the_loop_was_busy_are_skipped_not_caught_up() -> None:
    assert next_due(10.0, 2.0, now=15.3) == 16.0
    assert next_due(10.0, 2.0, now=16.0) == 18.0  # exactly on a point: that one has passed


@pytest.mark.parametrize("now", [10.0, 10.5, 12.0, 13.999, 100.25])
def test_the_next_beat_is_always_ahead_and_on_the_grid(now: float) -> None:
    due = next_due(10.0, 0.5, now)

    assert due > now and due - now <= 0.5
    assert ((due - 10.0) / 0.5).is_integer()


def test_beats_yield_once_per_interval() -> None:
    async def count() -> int:
        seen = 0
        async for _ in beats(0.01):
            seen += 1
            if seen == 3:
                return seen
        return seen

    assert asyncio.run(count()) == 3


def test_each_connection_draws_its_own_keepalive_ping_interval() -> None:
    intervals = {pacing.keepalive_ping_interval() for _ in range(200)}

    low = pacing.KEEPALIVE_PING_S * (1 - pacing.KEEPALIVE_PING_SPREAD)
    high = pacing.KEEPALIVE_PING_S * (1 + pacing.KEEPALIVE_PING_SPREAD)
    assert all(low <= interval <= high for interval in intervals)
    assert len(intervals) > 100  # drawn, not one shared value
