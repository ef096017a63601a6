"""The garbage collector's thresholds for a process that serves streams: the Edge and the Node.

Each open stream holds a hundred or two objects for as long as it runs (its request, its task,
its run and lease on the Edge; its upstream response on the Node). With the interpreter's
thresholds (700, 10, 10) the young collections came every few hundred objects, caught the
tokens in flight and moved them on, and the full ones came every second or so, each rescanning
every open stream with the event loop stopped: at 2,000 paced streams a fifth of the Edge's CPU
and of the Node's went to the collector, with full collections of 100-150 ms that every stream
waited through (docs/benchmarks.md, "Streaming").

A young collection every 10,000 objects catches what lives on rather than what is in flight
(a pause of a few milliseconds); the middle one after two of them keeps its pauses as short;
a full one waits for a hundred middle ones. Garbage in reference cycles is rare on these paths
(a few objects per stream): it waits longer for its collection, not forever.
"""

from __future__ import annotations

import gc

SERVING_THRESHOLDS = (10_000, 2, 100)


def tune_for_serving() -> None:
    """Set this process's collector thresholds to ``SERVING_THRESHOLDS``."""
    gc.set_threshold(*SERVING_THRESHOLDS)
