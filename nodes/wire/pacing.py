"""Keep-alive pacing: beats on a fixed grid, each session at a phase of its own.

Both ends of a Node session send keep-alive frames on an interval. Sleeping one interval after
each beat lets the phase slide whenever the event loop wakes a beat late, and it wakes every beat
that fell due while it was busy in the same turn: those sessions then beat together from then on.
At thousands of sessions every busy moment gathered more of them, until their beats came in bursts
that held requests up for hundreds of milliseconds once per interval. Beats due on a grid keep
their phase however late the loop wakes them.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import AsyncIterator


def next_due(due: float, interval_s: float, now: float) -> float:
    """The beat after the one due at ``due``: one interval on, or, past beats missed while the
    loop was busy, the first point of the same grid after ``now`` (no catching up in a burst)."""
    following = due + interval_s
    if following > now:
        return following
    return following + math.floor((now - following) / interval_s + 1) * interval_s


async def beats(interval_s: float) -> AsyncIterator[None]:
    """Yield once per ``interval_s``, the first at a random point of the first interval."""
    loop = asyncio.get_running_loop()
    due = loop.time() + random.uniform(0, interval_s)
    while True:
        await asyncio.sleep(max(0.0, due - loop.time()))
        yield
        due = next_due(due, interval_s, loop.time())
