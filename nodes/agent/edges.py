"""The Edge URLs a Node tries in turn (``--edge`` given more than once).

Of several Edges sharing one config (`edge.ha`), one leads and the others refuse Nodes with close
code 4503. A Node tries the next URL at once after an attempt that found no leader there, or after a
session that ended (its Edge may have gone: another leads now), and waits out its backoff only
after a whole pass over the list found no leader: so it follows a new leader within a pass,
without an operator. With one URL it waits before every new attempt, as it always did.

A pass in which some Edge answered as a standby, and none refused the Node for a reason of its own
(a bad token, another agent with its id), found the cluster up and between leaders (a takeover
takes seconds): the Node asks again after ``STANDBY_RETRY_S``, not after a backoff that grew
while the old leader was gone.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

STANDBY_RETRY_S = 0.5


class EdgeRotation:
    def __init__(self, urls: Sequence[str]) -> None:
        if not urls:
            raise ValueError("at least one Edge URL is needed")
        self.urls = tuple(urls)
        self._index = 0
        self._misses = 0  # attempts in this pass that found no leader
        self._standby_seen = False  # in this pass
        self._refused = False  # in this pass: closed for another reason than being a standby
        self.pass_saw_standby = False  # in the pass that ended last

    @property
    def current(self) -> str:
        return self.urls[self._index]

    def move_on(self, served: bool, *, standby: bool = False, refused: bool = False) -> bool:
        """Go to the next URL after an attempt; ``served``: it had a session that served;
        ``standby``: the Edge refused it as a standby; ``refused``: for another reason (a close
        code: unauthorized, superseded). True when a delay comes first: a whole pass missed
        (``pass_saw_standby`` says whether it was only for want of a leader), or there is only
        one URL."""
        self._index = (self._index + 1) % len(self.urls)
        self._standby_seen |= standby
        self._refused |= refused
        if served:
            self._end_pass()  # a new pass begins with the next URL
            return len(self.urls) == 1
        self._misses += 1
        if self._misses >= len(self.urls):
            self._end_pass()
            return True
        return False

    def _end_pass(self) -> None:
        self.pass_saw_standby = self._standby_seen and not self._refused
        self._standby_seen = self._refused = False
        self._misses = 0


def standby_retry_delay(rand: Callable[[], float] = random.random) -> float:
    """``STANDBY_RETRY_S`` with 20% jitter, so that a fleet does not ask in lockstep."""
    return STANDBY_RETRY_S * (0.8 + 0.4 * rand())
