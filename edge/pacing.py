"""Pacing CPU-bound work that runs in a thread beside the event loop.

The loop gives up the interpreter at every socket call and, while another thread computes, gets
it back only when that thread is made to let go: up to a switch interval later (0.5 ms in
`run_edge`), for each call. With thousands of Node sessions a turn of the loop makes thousands
of calls, so a thread that computed for half a second held requests up for 400-600 ms at 3,000
Nodes (docs/benchmarks.md, "Fleet").
Paced work (``paced``) stops for PAUSE_S after each SLICE_S of it, at the points that call
``pace``: the loop runs unhindered meanwhile, and the work takes about half as long again. (A
pause as long as the slice made a fleet-wide apply at 3,000 Nodes tenths of a second slower, and
requests waited no less for it: the loop's turns between slices are short.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

SLICE_S = 0.002
PAUSE_S = 0.001

_pacing = threading.local()


@contextmanager
def paced() -> Iterator[None]:
    """Pace the work of this thread within the block (``pace``); within a paced block, the
    outer one goes on."""
    if getattr(_pacing, "next_pause", None) is not None:
        yield
        return
    _pacing.next_pause = time.perf_counter() + SLICE_S
    try:
        yield
    finally:
        del _pacing.next_pause


def pace() -> None:
    """A point where paced work may stop for a moment; elsewhere, nothing."""
    due = getattr(_pacing, "next_pause", None)
    if due is not None and time.perf_counter() >= due:
        time.sleep(PAUSE_S)
        _pacing.next_pause = time.perf_counter() + SLICE_S
