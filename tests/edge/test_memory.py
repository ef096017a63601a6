"""The collector around big configs: paused while one is built, frozen after, every pause timed."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from edge.memory import (
    COLLECTION_TIMES,
    CollectionTimes,
    FreezeAfterSignIns,
    collection_paused,
    freeze_long_lived,
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


def test_the_process_watch_is_installed_once() -> None:
    try:
        watch_collections()
        watch_collections()
        assert gc.callbacks.count(COLLECTION_TIMES) == 1
    finally:
        gc.callbacks.remove(COLLECTION_TIMES)


def test_sign_ins_are_frozen_once_they_settle(unfrozen: None) -> None:
    freezer = FreezeAfterSignIns(settle_s=0.01)

    async def storm() -> tuple[int, int]:
        gc.unfreeze()
        for _ in range(100):
            freezer.note_sign_in()  # one freeze for the lot, not one each
        before = gc.get_freeze_count()
        kept = [[index] for index in range(1000)]  # a session's objects, made after
        await asyncio.sleep(0.05)  # timers run in deadline order: the freeze comes first
        assert kept
        return before, gc.get_freeze_count()

    before, after = asyncio.run(storm())

    assert before == 0 and after >= 1000
