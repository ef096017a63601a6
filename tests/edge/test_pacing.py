"""Paced work (edge.pacing) stops at its pace points once a slice of it has run, and only there."""

from __future__ import annotations

import json
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


def test_a_paced_block_within_one_goes_on_with_the_outer_slice(clock: Clock) -> None:
    with pacing.paced():
        clock.now += pacing.SLICE_S / 2
        with pacing.paced():
            clock.now += pacing.SLICE_S / 2
            pacing.pace()
        assert clock.pauses == [pacing.PAUSE_S]
        clock.now += 10 * pacing.SLICE_S
        pacing.pace()  # still paced once the inner block ended

    assert clock.pauses == [pacing.PAUSE_S, pacing.PAUSE_S]


def test_a_document_encoded_in_pieces_pauses_between_them(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fleet's refresh result, rendered in a thread beside the event loop, lets the loop have
    the interpreter between slices (docs/benchmarks.md, "Fleet")."""
    from edge.operator_api.json_renderer import OperatorJSONRenderer

    def ticking() -> float:  # each look at the clock finds a tenth of a slice gone
        clock.now += pacing.SLICE_S / 10
        return clock.now

    monkeypatch.setattr(pacing.time, "perf_counter", ticking)
    # An integer past 64 bits: what orjson cannot write goes through DRF's encoder, paced.
    document = {"changes": [{"path": f"nodes[n{i}]", "old": 2**70} for i in range(100)]}

    rendered = OperatorJSONRenderer().render(document)

    assert json.loads(rendered) == document
    assert len(clock.pauses) >= 5
    clock.pauses.clear()
    pacing.pace()  # the renderer's pacing ended with it
    assert clock.pauses == []
