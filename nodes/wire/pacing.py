"""Keep-alive pacing: beats on a fixed grid, each session at a phase of its own.

Both ends of a Node session send keep-alive frames on an interval. Sleeping one interval after
each beat lets the phase slide whenever the event loop wakes a beat late, and it wakes every beat
that fell due while it was busy in the same turn: those sessions then beat together from then on.
At thousands of sessions every busy moment gathered more of them, until their beats came in bursts
that held requests up for hundreds of milliseconds once per interval. Beats due on a grid keep
their phase however late the loop wakes them.

The websocket library's own keepalive (a control ping every ``ping_interval``, answered by the
peer's library, which finds a dead peer) is timed from the connection's opening: a fleet that
signed in together pinged together, thousands of pings and pongs in one burst every 20 s (about
70 ms of the Edge's loop at 3,000 Nodes). Each connection draws an interval of its own.
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


# The websocket keepalive's interval, on average: the library's default.
KEEPALIVE_PING_S = 20.0
# How far one connection's interval is from the average, at most: 15-25 s.
KEEPALIVE_PING_SPREAD = 0.25


def keepalive_ping_interval() -> float:
    """A websocket connection's keepalive ping interval (``ping_interval``), drawn per
    connection: pings of connections opened together drift apart from the first one on."""
    return KEEPALIVE_PING_S * random.uniform(1 - KEEPALIVE_PING_SPREAD, 1 + KEEPALIVE_PING_SPREAD)
