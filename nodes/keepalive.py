"""One timer for every Node session's keep-alive.

Each session looked at its Node once per interval from a task of its own, sleeping in between.
A sleeping task is about nine objects (its sleep's coroutine, future, timer handle and context,
the async generator's step) that every beat replaces, so they live an interval each: too long
to die young, they went to the collector's oldest generation, and at 3,000 Nodes they were more
than half of what a full collection scanned, with the event loop stopped (docs/benchmarks.md,
"Fleet"). Here one timer walks the sessions: each has a slot of the interval, drawn at random so
that Nodes signed in together are not looked at in one burst, and keeps it however late the loop
wakes the timer.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Protocol

log = logging.getLogger(__name__)

# The interval an Edge runs with unless its settings say otherwise (IOP_NODE_PING_INTERVAL_S).
DEFAULT_PING_INTERVAL_S = 2.0
# Slots per interval: a session is looked at within 1/SLOTS of an interval of its time.
SLOTS = 20


class KeptAlive(Protocol):
    def keep_alive_due(self) -> None:
        """Called once per interval, on the event loop; must not block."""


class KeepAliveRound:
    """Calls each member's ``keep_alive_due`` once per ``interval_s``, from one timer that runs
    on the event loop of the first ``add`` for as long as there are members."""

    def __init__(self, interval_s: float, slots: int = SLOTS) -> None:
        self.interval_s = interval_s
        self._tick_s = interval_s / slots
        # Insertion-ordered sets: a member's place in its slot never changes.
        self._slots: list[dict[KeptAlive, None]] = [{} for _ in range(slots)]
        self._slot_of: dict[KeptAlive, int] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._next_slot = 0
        self._next_due = 0.0
        self._ticking = False  # in ``_tick``, which arms the next timer itself

    def __len__(self) -> int:
        return len(self._slot_of)

    def add(self, member: KeptAlive) -> None:
        """Look at ``member`` from now on, first within one interval."""
        if member in self._slot_of:
            return
        slot = random.randrange(len(self._slots))
        self._slots[slot][member] = None
        self._slot_of[member] = slot
        if self._timer is None and not self._ticking:
            loop = asyncio.get_running_loop()
            self._next_slot, self._next_due = 0, loop.time() + self._tick_s
            self._timer = loop.call_at(self._next_due, self._tick)

    def discard(self, member: KeptAlive) -> None:
        slot = self._slot_of.pop(member, None)
        if slot is None:
            return
        del self._slots[slot][member]
        if not self._slot_of and self._timer is not None and not self._ticking:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        self._ticking = True
        try:
            self.look_at_due(loop.time())
        finally:
            self._ticking = False
        self._timer = loop.call_at(self._next_due, self._tick) if self._slot_of else None

    def look_at_due(self, now: float) -> None:
        """Call the members of every slot due by ``now`` (the loop's time), each slot once
        however late this comes: a slot that was missed is looked at now, and its members keep
        their slot after. The round's timer calls this."""
        for _ in range(len(self._slots)):
            if self._next_due > now:
                break
            for member in list(self._slots[self._next_slot]):
                try:
                    member.keep_alive_due()
                except Exception:  # one member's bug must not stop the others' keep-alive
                    log.exception("keep-alive of %r failed", member)
            self._next_slot = (self._next_slot + 1) % len(self._slots)
            self._next_due += self._tick_s
        if self._next_due <= now:  # a whole interval late: on to the grid after now
            missed = int((now - self._next_due) / self._tick_s) + 1
            self._next_slot = (self._next_slot + missed) % len(self._slots)
            self._next_due += missed * self._tick_s
