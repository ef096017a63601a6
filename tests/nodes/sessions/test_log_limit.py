"""The per-session log limit, on a clock the test moves by hand."""

from __future__ import annotations

import logging

import pytest

from nodes.log_limit import LogLimit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records]


LOG = logging.getLogger("tests.log_limit")


def test_it_logs_up_to_its_lines_then_counts_the_rest(
    caplog: pytest.LogCaptureFixture, clock: Clock
) -> None:
    limit = LogLimit("node n1", lines=3, interval_s=10, clock=clock)
    with caplog.at_level(logging.WARNING):
        for i in range(1000):
            limit.warning(LOG, "bad frame %d", i)
    assert messages(caplog) == ["bad frame 0", "bad frame 1", "bad frame 2"]
    assert limit.suppressed == 997


def test_the_next_window_starts_with_a_summary_of_the_last(
    caplog: pytest.LogCaptureFixture, clock: Clock
) -> None:
    limit = LogLimit("node n1", lines=2, interval_s=10, clock=clock)
    with caplog.at_level(logging.WARNING):
        for i in range(5):
            limit.warning(LOG, "line %d", i)
        clock.now += 9.9
        limit.warning(LOG, "still the same window")
        clock.now += 0.1
        limit.warning(LOG, "a new window")
    assert messages(caplog) == [
        "line 0",
        "line 1",
        "node n1: 4 more warnings suppressed in the last 10 s",
        "a new window",
    ]


def test_flush_sums_up_what_was_held_back_once(
    caplog: pytest.LogCaptureFixture, clock: Clock
) -> None:
    limit = LogLimit("node n1", lines=1, interval_s=60, clock=clock)
    with caplog.at_level(logging.WARNING):
        limit.flush(LOG)  # nothing held back: nothing to say
        limit.warning(LOG, "one")
        limit.warning(LOG, "two")
        clock.now += 5
        limit.flush(LOG)
        limit.flush(LOG)
    assert messages(caplog) == ["one", "node n1: 1 more warnings suppressed in the last 5 s"]


def test_it_keeps_the_level_of_each_line(caplog: pytest.LogCaptureFixture, clock: Clock) -> None:
    limit = LogLimit("node n1", clock=clock)
    with caplog.at_level(logging.INFO):
        limit.log(LOG, logging.ERROR, "rejected config %s", "r1")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.ERROR, "rejected config r1")
    ]
