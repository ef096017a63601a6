"""The collector around big configs: paused while one is built, frozen after, every pause timed;
replaced structures let go of a slice per loop turn."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest

from edge.memory import (
    COLLECTION_TIMES,
    FULL_COLLECTIONS_WAIT,
    CollectionTimes,
    FreezeAfterSignIns,
    collection_paused,
    freeze_long_lived,
    freeze_without_collecting,
    release_in_slices,
    settle_after_swap,
    watch_collections,
)


@pytest.fixture
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()


def test_collection_is_paused_inside_and_enabled_again_after() -> None:
    assert gc.isenabled()

    with collection_paused():
        assert not gc.isenabled()
        with collection_paused():  # nested: the inner one must not enable it early
            pass
        assert not gc.isenabled()

    assert gc.isenabled()


def test_a_pause_leaves_a_disabled_collector_disabled() -> None:
    gc.disable()
    try:
        with collection_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_collection_is_enabled_again_after_an_error() -> None:
    with pytest.raises(ValueError), collection_paused():
        raise ValueError("boom")

    assert gc.isenabled()


def test_freezing_moves_what_is_alive_out_of_the_collectors_sight(unfrozen: None) -> None:
    kept = [[index] for index in range(1000)]  # tracked containers

    freeze_long_lived()

    assert gc.get_freeze_count() >= len(kept)
    generations = [gc.get_objects(generation=generation) for generation in range(3)]
    assert not any(item is kept[0] for objects in generations for item in objects)


class _Cycle:
    """Garbage only a collection frees: it refers to itself."""

    def __init__(self) -> None:
        self.me = self


def cyclic_garbage() -> weakref.ref[_Cycle]:
    return weakref.ref(_Cycle())  # unreachable as soon as this returns, but for its cycle


def test_freezing_the_long_lived_collects_the_garbage_first(unfrozen: None) -> None:
    gc.disable()  # no collection of its own may free it first
    try:
        garbage = cyclic_garbage()
        freeze_long_lived()
    finally:
        gc.enable()

    # Frozen with the rest, it would have stayed for the life of the process.
    assert garbage() is None


def test_freezing_what_was_just_built_collects_nothing(unfrozen: None) -> None:
    gc.disable()
    try:
        garbage = cyclic_garbage()
        freeze_without_collecting()
        gc.collect()  # a frozen cycle is out of any collection's sight
        assert garbage() is not None
    finally:
        gc.enable()


def test_every_collection_is_counted_and_timed_per_generation() -> None:
    times = CollectionTimes()
    gc.callbacks.append(times)
    try:
        gc.collect(0)
        gc.collect(2)
    finally:
        gc.callbacks.remove(times)

    report = times.report()
    young, _, full = report["generations"]
    assert young["collections"] >= 1 and full["collections"] >= 1
    assert full["longest_ms"] > 0 and full["total_ms"] >= full["longest_ms"]
    assert report["frozen_objects"] == gc.get_freeze_count()
    assert report["thresholds"] == list(gc.get_threshold())


def test_the_process_watch_is_installed_once() -> None:
    try:
        watch_collections()
        watch_collections()
        assert gc.callbacks.count(COLLECTION_TIMES) == 1
    finally:
        gc.callbacks.remove(COLLECTION_TIMES)


def test_sign_ins_are_frozen_once_they_settle(unfrozen: None) -> None:
    freezer = FreezeAfterSignIns(settle_s=0.01)
    thresholds = gc.get_threshold()

    async def storm() -> tuple[int, int, tuple[int, int, int]]:
        gc.unfreeze()
        for _ in range(100):
            freezer.note_sign_in()  # one freeze for the lot, not one each
        before = gc.get_freeze_count()
        settling = gc.get_threshold()
        kept = [[index] for index in range(1000)]  # a session's objects, made after
        await asyncio.sleep(0.05)  # timers run in deadline order: the freeze comes first
        assert kept
        return before, gc.get_freeze_count(), settling

    before, after, settling = asyncio.run(storm())

    assert before == 0 and after >= 1000
    # Until the freeze, young collections go on and full ones wait; then all is as before.
    assert settling == (thresholds[0], thresholds[1], FULL_COLLECTIONS_WAIT)
    assert gc.get_threshold() == thresholds


class Part:
    """A part that says when it is freed."""

    def __init__(self, freed: list[int], index: int) -> None:
        self.freed, self.index = freed, index

    def __del__(self) -> None:
        self.freed.append(self.index)


def test_parts_are_let_go_a_slice_per_loop_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("edge.memory.RELEASED_PER_TURN", 4)
    freed: list[int] = []

    async def release() -> list[int]:
        release_in_slices([Part(freed, index) for index in range(10)])
        counts = [len(freed)]
        for _ in range(4):
            await asyncio.sleep(0)
            counts.append(len(freed))
        return counts

    assert asyncio.run(release()) == [0, 4, 8, 10, 10]
    assert sorted(freed) == list(range(10))


def test_without_a_running_loop_parts_are_let_go_at_once() -> None:
    freed: list[int] = []

    release_in_slices([Part(freed, index) for index in range(3)])

    assert sorted(freed) == [0, 1, 2]


def test_after_the_last_slice_then_runs_in_a_turn_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("edge.memory.RELEASED_PER_TURN", 2)
    freed: list[int] = []
    seen: list[int] = []

    async def release() -> list[int]:
        release_in_slices(
            [Part(freed, index) for index in range(3)], then=lambda: seen.append(len(freed))
        )
        for _ in range(4):
            await asyncio.sleep(0)
        return seen

    assert asyncio.run(release()) == [3]


def test_without_a_running_loop_then_runs_after_every_part_is_let_go() -> None:
    freed: list[int] = []
    seen: list[int] = []

    release_in_slices(
        [Part(freed, index) for index in range(3)], then=lambda: seen.append(len(freed))
    )

    assert seen == [3]


def test_settling_after_a_swap_collects_freezes_and_trims(
    unfrozen: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    trims: list[str] = []
    monkeypatch.setattr("edge.memory.return_free_memory", lambda: trims.append("trim") or True)

    async def settle() -> weakref.ref[_Cycle]:
        gc.disable()  # no collection of its own may free it first
        try:
            garbage = cyclic_garbage()
            settle_after_swap()
        finally:
            gc.enable()
        await asyncio.sleep(0.05)  # the trim runs in the loop's default executor
        return garbage

    garbage = asyncio.run(settle())

    assert garbage() is None
    assert gc.get_freeze_count() > 0
    assert trims == ["trim"]
