"""Memory: giving it back to the operating system, keeping the collector off big heaps, and
letting go of big structures a slice at a time.

glibc keeps freed heap memory for reuse; after a busy period that is several MB of resident memory
the Edge no longer needs (about 6 MB after a benchmark run here, docs/benchmarks.md).
`malloc_trim` returns it. Elsewhere than glibc this does nothing.

A full collection scans every object the process holds, with the event loop stopped: with a
fleet's config and sessions, seconds (docs/benchmarks.md, "Fleet"). What lives as long as the
process or the running config is frozen out of its sight, building a config pauses it, and every
pause is timed. Freeing a structure of tens of thousands of objects is one uninterrupted step too;
``release_in_slices`` spreads it over turns of the event loop.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    return getattr(ctypes.CDLL(name), "malloc_trim", None)


_trim = _malloc_trim()


def return_free_memory() -> bool:
    """True when the C library gave memory back to the operating system."""
    return _trim is not None and _trim(0) == 1


@contextmanager
def collection_paused() -> Iterator[None]:
    """No garbage collection while a config is built: it allocates hundreds of thousands of
    objects that all live on, so each collection they would trigger frees nothing and only
    rescans them (it more than doubled the time of a 1,000-node config's parse)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# Objects let go of per turn of the event loop by ``release_in_slices``: a replaced node and its
# providers cost about 3 µs to free (quiet machine), so a slice stays around a millisecond.
RELEASED_PER_TURN = 250


def release_in_slices(parts: list[Any], then: Callable[[], object] | None = None) -> None:
    """Let go of ``parts`` RELEASED_PER_TURN at a time, one slice per turn of the running event
    loop, then call ``then`` in a turn of its own; all at once without a loop.

    Hand it the parts of a structure just dropped (a replaced config's nodes, say): the structure
    itself is then freed as a shell, and each part, unless something else still holds it, with
    its slice. A 3,000-node config freed in one step held the loop for about 30 ms.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        parts.clear()
        if then is not None:
            then()
        return

    def release() -> None:
        del parts[-RELEASED_PER_TURN:]
        if parts:
            loop.call_soon(release)
        elif then is not None:
            loop.call_soon(then)

    loop.call_soon(release)


def settle_after_swap() -> None:
    """After a swap's replaced config is let go of: collect and freeze (``freeze_long_lived``),
    then give the freed heap back in a thread (``malloc_trim`` runs without the interpreter).

    In a turn of its own, not the swap's: the collection alone took 10-30 ms at 3,000 Nodes.
    Without the trim, the heap a fleet-wide config left behind stayed resident, and the Edge's
    memory grew by about 12 % over ten applies at 3,000 Nodes.
    """
    freeze_long_lived()
    asyncio.get_running_loop().run_in_executor(None, return_free_memory)


def freeze_long_lived() -> None:
    """Collect the garbage there is now, then move every object still alive out of the
    collector's sight (``gc.freeze``).

    Called once the Edge has started and after each config swap: the running config, its pool
    and the Django modules then cost no full collection a scan. Frozen objects are still freed
    by reference counting as usual, but a reference cycle among them never is: garbage frozen
    with them would stay for the life of the process (a `GET /status` of 1,000 Nodes leaves
    about 35,000 such objects until a collection frees them, about 10 MB). The collection
    before the freeze scans only what is not frozen yet.
    """
    gc.collect()
    gc.freeze()


def freeze_without_collecting() -> None:
    """``gc.freeze`` without a collection first, for right after building a large structure
    (a refresh's candidate config, the sessions of a fleet signing in): a collection would scan
    all of it, with the event loop held. A refresh collects before it builds its candidate, so
    little garbage is frozen with it."""
    gc.freeze()


# A full collection's threshold while sign-ins settle: middle collections before a full one.
FULL_COLLECTIONS_WAIT = 1 << 30


class FreezeAfterSignIns:
    """Freezes what is alive a moment after Nodes sign in (``note_sign_in``, on the loop).

    Each Node session holds objects for as long as it runs. Left unfrozen after a fleet signs in,
    they were rescanned by every full collection, and the keep-alive traffic of thousands of
    sessions triggers one every second or two: 200 to 300 ms each at 3,000 Nodes, the loop stopped
    throughout. Frozen, they cost none; a session that ends is still freed by reference counting
    (it holds no reference cycle once closed). One freeze follows ``settle_s`` after the first
    sign-in (a Node's token accepted) since the last, so a storm of sign-ins is frozen a second
    at a time.

    Until that freeze, full collections wait (young ones go on, so short-lived garbage is still
    collected): within a storm each one rescanned every session signed in since the last freeze,
    40 to 200 ms at 3,000 Nodes, growing with each (docs/benchmarks.md, "Fleet").
    """

    def __init__(self, settle_s: float = 1.0) -> None:
        self.settle_s = settle_s
        self._due: asyncio.TimerHandle | None = None
        self._thresholds: tuple[int, int, int] | None = None

    def note_sign_in(self) -> None:
        if self._due is None:
            self._thresholds = gc.get_threshold()
            young, middle, _ = self._thresholds
            gc.set_threshold(young, middle, FULL_COLLECTIONS_WAIT)
            self._due = asyncio.get_running_loop().call_later(self.settle_s, self._freeze)

    def _freeze(self) -> None:
        self._due = None
        freeze_without_collecting()
        if self._thresholds is not None:
            gc.set_threshold(*self._thresholds)
            self._thresholds = None


class CollectionTimes:
    """How long the collector has held the process, per generation: each pause stops the event
    loop, so the longest is the figure to watch (``GET /status``, ``gc``)."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.total_s = [0.0, 0.0, 0.0]
        self.longest_s = [0.0, 0.0, 0.0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        generation = info["generation"]
        pause = time.perf_counter() - self._started
        self.count[generation] += 1
        self.total_s[generation] += pause
        self.longest_s[generation] = max(self.longest_s[generation], pause)

    def report(self) -> dict[str, Any]:
        return {
            "frozen_objects": gc.get_freeze_count(),
            "thresholds": list(gc.get_threshold()),
            "generations": [
                {"collections": count, "total_ms": total * 1000, "longest_ms": longest * 1000}
                for count, total, longest in zip(
                    self.count, self.total_s, self.longest_s, strict=True
                )
            ],
        }


COLLECTION_TIMES = CollectionTimes()


def watch_collections() -> None:
    """Time every collection of this process into ``COLLECTION_TIMES`` (once per process)."""
    if COLLECTION_TIMES not in gc.callbacks:
        gc.callbacks.append(COLLECTION_TIMES)
