"""Paced work (edge.pacing) stops at its pace points once a slice of it has run, and only there."""

from __future__ import annotations

import threading

import pytest

from edge import pacing


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(pacing.time, "perf_counter", fake.perf_counter)
    monkeypatch.setattr(pacing.time, "sleep", fake.sleep)
    return fake


def test_paced_work_pauses_after_each_slice(clock: Clock) -> None:
    with pacing.paced():
        pacing.pace()  # no time has passed
        clock.now += pacing.SLICE_S / 2
        pacing.pace()
        assert clock.pauses == []
        clock.now += pacing.SLICE_S / 2
        pacing.pace()
        assert clock.pauses == [pacing.PAUSE_S]
        clock.now += pacing.SLICE_S / 2
        pacing.pace()  # a new slice began after the pause
        assert clock.pauses == [pacing.PAUSE_S]


def test_outside_a_paced_block_nothing_pauses(clock: Clock) -> None:
    with pacing.paced():
        pass
    clock.now += 10 * pacing.SLICE_S
    pacing.pace()

    assert clock.pauses == []


def test_pacing_is_per_thread(clock: Clock) -> None:
    with pacing.paced():
        clock.now += 10 * pacing.SLICE_S
        elsewhere = threading.Thread(target=pacing.pace)
        elsewhere.start()
        elsewhere.join()
        assert clock.pauses == []  # the other thread's work is not paced
        pacing.pace()

    assert clock.pauses == [pacing.PAUSE_S]
