"""The elector: on the event loop, turns what the lock reports into takeovers and fences.

Every tick (a tenth of a second, or at once when the lock's thread reports a change) it compares
the lock's report with the role. A standby whose lock was taken takes over; a leader (or an Edge
taking over) whose lock is gone, or whose database session has not answered for
``FENCE_AFTER_S``, is fenced: the role flips to standby in that same step, so no request or Node
session is admitted from then on, before the fence's cleanup (failing runs, closing Node
sessions) has even begun.

A takeover serves only ``TAKEOVER_GRACE_S`` after the lock was taken: the server frees the lock
of a session it ended at once, and the Edge that held it learns so from its socket within
milliseconds, but at the latest at its next check; the grace outlasts that check, so the old
leader has stopped admitting before the new one starts.

The lock (``edge.ha.pg_lock``) only reports; which process leads is decided by the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from edge.ha.role import LEADER, STANDBY, TAKING_OVER, Leadership

log = logging.getLogger(__name__)

TICK_S = 0.1
# A session unanswered for this long is taken for lost: fenced well before the server frees the
# lock for another Edge (its keepalives give up 5-6 s after they last heard from this one).
FENCE_AFTER_S = 3.0
# Longer than the lock's check interval (1 s) and a tick: see above.
TAKEOVER_GRACE_S = 1.5

TAKE_OVER, FENCE = "take_over", "fence"


class LockReport(Protocol):
    """What the elector reads of the lock (``PgLeaderLock``)."""

    @property
    def held_term(self) -> int | None: ...

    @property
    def last_ok(self) -> float: ...

    @property
    def last_error(self) -> str: ...

    def release(self) -> None: ...


class Elector:
    def __init__(
        self,
        lock: LockReport,
        leadership: Leadership,
        *,
        take_over: Callable[[], Awaitable[None]],
        fence: Callable[[str], Awaitable[None]],
        clock: Callable[[], float] = time.monotonic,
        fence_after_s: float = FENCE_AFTER_S,
        takeover_grace_s: float = TAKEOVER_GRACE_S,
    ) -> None:
        self._lock = lock
        self.leadership = leadership
        self._take_over = take_over
        self._fence = fence
        self._clock = clock
        self._fence_after_s = fence_after_s
        self._grace_s = takeover_grace_s
        self._wake = asyncio.Event()
        self._term: int | None = None  # the lock's term this process took over with
        self.fence_reason = ""
        self._tasks: set[asyncio.Task[None]] = set()

    def step(self) -> str | None:
        """One comparison of the lock's report with the role; the action it starts, if any.
        A fence flips the role here, synchronously."""
        held = self._lock.held_term
        if self.leadership.state == STANDBY:
            if held is not None and held != self._term:
                self._term = held
                self.leadership.lock_acquired()
                return TAKE_OVER
            return None
        if held is None or held != self._term:
            reason = self._lock.last_error or "the leader lock was released"
        elif (quiet := self._clock() - self._lock.last_ok) > self._fence_after_s:
            reason = f"the database session did not answer for {quiet:.1f} s"
        else:
            return None
        self.leadership.lost()
        self._lock.release()
        self.fence_reason = reason
        return FENCE

    def wake(self) -> None:
        """Step now rather than at the next tick (on the loop: ``call_soon_threadsafe``)."""
        self._wake.set()

    async def run(self) -> None:
        """Tick until cancelled."""
        while True:
            self._wake.clear()
            action = self.step()
            if action == TAKE_OVER:
                self._spawn(self._taking_over(self._term))
            elif action == FENCE:
                log.error("fenced: %s; serving nothing until the lock is held", self.fence_reason)
                self._spawn(self._fence(self.fence_reason))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), TICK_S)

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _taking_over(self, term: int | None) -> None:
        log.info("leader lock held (term %s): taking over", term)
        serve_from = self._clock() + self._grace_s
        try:
            await self._take_over()
            # The grace: an old leader that lost this lock has stopped admitting by then.
            await asyncio.sleep(max(0.0, serve_from - self._clock()))
        except Exception:
            log.exception("takeover failed: giving the lock up")
            if self.leadership.state in (TAKING_OVER, LEADER) and self._term == term:
                self.leadership.lost()
                self._lock.release()
            return
        # The lock may have gone while the config loaded: then the fence already ran.
        if self.leadership.state == TAKING_OVER and self._term == term:
            self.leadership.took_over()
            log.info("leading (term %s)", term)
