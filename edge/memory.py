"""Giving memory back to the operating system after a burst of traffic.

glibc keeps freed heap memory for reuse; after a busy period that is several MB of resident memory
the Edge no longer needs (about 6 MB after a benchmark run here, docs/benchmarks.md).
`malloc_trim` returns it. Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    return getattr(ctypes.CDLL(name), "malloc_trim", None)


_trim = _malloc_trim()


def return_free_memory() -> bool:
    """True when the C library gave memory back to the operating system."""
    return _trim is not None and _trim(0) == 1
