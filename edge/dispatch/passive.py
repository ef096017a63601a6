"""Passive health: a provider whose runs keep failing leaves the pool for a cooldown.

Per provider, a breaker: **closed** (normal) → **open** after ``failures`` failures within
``window_s`` seconds, or at once on a *trip* (e.g. the upstream refused the gateway's credentials)
→ **half-open** once ``cooldown_s`` has passed, admitting one trial run → closed when the trial
succeeds, open again when it fails. The cooldown is counted from the opening with the policy in
force, so a live change of ``cooldown_s`` applies to breakers already open. Plain state: the
pool owns the clock and decides what an open breaker means for admission.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from edge.dispatch.lease import Lease

BreakerState = Literal["closed", "open", "half_open"]
CLOSED: BreakerState = "closed"
OPEN: BreakerState = "open"
HALF_OPEN: BreakerState = "half_open"


@dataclass(frozen=True, slots=True)
class PassiveHealthPolicy:
    """The knobs (config ``passive_health``); ``failures: 0`` counts nothing (trips still open)."""

    failures: int = 3
    window_s: float = 30.0
    cooldown_s: float = 30.0


class Breaker:
    """One provider's passive health. ``trial`` is the half-open state's one run in flight."""

    __slots__ = ("_failures", "opened_at", "reason", "state", "trial")

    def __init__(self) -> None:
        self._failures: deque[float] = deque()
        self.state: BreakerState = CLOSED
        self.reason = ""
        self.opened_at = 0.0
        self.trial: Lease | None = None

    def fail(self, now: float, reason: str, policy: PassiveHealthPolicy, *, trip: bool) -> bool:
        """Count a failure; True when the breaker opens on it."""
        if self.state == OPEN:
            return False
        if self.state == HALF_OPEN or trip:
            self._open(now, reason)
            return True
        if policy.failures == 0:
            return False
        self._failures.append(now)
        self._forget_before(now - policy.window_s)
        if len(self._failures) >= policy.failures:
            self._open(now, reason)
            return True
        return False

    def succeed(self) -> bool:
        """The trial run went well; True when the breaker closes on it."""
        if self.state != HALF_OPEN:
            return False
        self.reset()
        return True

    def cool(self, now: float, policy: PassiveHealthPolicy) -> bool:
        """True when an open breaker's cooldown is over: it is half-open from now on."""
        if self.state != OPEN or self.shown(now, policy) == OPEN:
            return False
        self.state = HALF_OPEN
        self.trial = None
        return True

    def shown(self, now: float, policy: PassiveHealthPolicy) -> BreakerState:
        """The state as of ``now``: an open breaker whose cooldown is over is half-open."""
        if self.state == OPEN and now >= self.opened_at + policy.cooldown_s:
            return HALF_OPEN
        return self.state

    def reopens_in(self, now: float, policy: PassiveHealthPolicy) -> float:
        """Seconds until an open breaker turns half-open; 0.0 otherwise."""
        if self.state != OPEN:
            return 0.0
        return max(0.0, self.opened_at + policy.cooldown_s - now)

    def recent_failures(self, now: float, policy: PassiveHealthPolicy) -> int:
        """Failures within the window (read only)."""
        horizon = now - policy.window_s
        return sum(1 for at in self._failures if at > horizon)

    def reset(self) -> None:
        self._failures.clear()
        self.state = CLOSED
        self.reason = ""
        self.opened_at = 0.0
        self.trial = None

    def _open(self, now: float, reason: str) -> None:
        self.state = OPEN
        self.reason = reason
        self.opened_at = now
        self.trial = None
        self._failures.clear()

    def _forget_before(self, horizon: float) -> None:
        failures = self._failures
        while failures and failures[0] <= horizon:
            failures.popleft()
