"""Who serves: the leader/standby state machine of one Edge process (plain Python).

A single Edge (no `edge.ha`) is the leader from the start and stays one. In HA an Edge starts as a
standby; holding the lock makes it ``taking_over`` (it loads the cluster's config, still serving
nothing) and then the leader; losing the lock, or a takeover that failed, makes it a standby again.
Only the leader admits: OpenAI requests and Node sessions.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

LEADER, STANDBY, TAKING_OVER = "leader", "standby", "taking_over"
# What `GET /status` says as `role`: a takeover in progress serves nothing yet.
REPORTED_ROLE = {LEADER: LEADER, STANDBY: STANDBY, TAKING_OVER: STANDBY}
# The OpenAI error code and the run error code of a request a standby (or a fenced leader) refuses.
EDGE_STANDBY = "edge_standby"
STANDBY_RETRY_AFTER_S = 1
# Refreshes are applied by the leader only: its config is the one the database and Nodes follow.
STANDBY_REFRESH_REFUSAL = (
    "This Edge is a standby: refresh on the leading Edge (GET /status says which one leads)."
)


class RoleError(RuntimeError):
    """A transition the state machine does not have (a bug in its caller)."""


class NotLeading(Exception):
    """A write only the leader may commit (an applied refresh), refused: the lock is gone."""


class Leadership:
    """The role of this process, and how many times it became the leader."""

    def __init__(self, ha: bool, clock: Callable[[], float] = time.time) -> None:
        self.ha = ha
        self._clock = clock
        self.state = STANDBY if ha else LEADER
        self.terms = 0 if ha else 1  # times this process became the leader
        self.since = clock()  # when the current state began (wall clock)

    @property
    def role(self) -> str:
        return REPORTED_ROLE[self.state]

    @property
    def admitting(self) -> bool:
        """Whether requests and Node sessions are served: only by the leader."""
        return self.state == LEADER

    def lock_acquired(self) -> None:
        """The lock is held: load the cluster's config before serving (``took_over``)."""
        self._move({STANDBY}, TAKING_OVER)

    def took_over(self) -> None:
        """The cluster's config is in force: serve from here on."""
        self._move({TAKING_OVER}, LEADER)
        self.terms += 1

    def lost(self) -> bool:
        """The lock is gone (or the takeover failed): stop serving. False when already a
        standby, so that a fence runs once per lost lock."""
        if not self.ha:
            raise RoleError("a single Edge (edge.ha off) has no lock to lose")
        if self.state == STANDBY:
            return False
        self._move({LEADER, TAKING_OVER}, STANDBY)
        return True

    def _move(self, sources: set[str], target: str) -> None:
        if not self.ha:
            raise RoleError("a single Edge (edge.ha off) is always the leader")
        if self.state not in sources:
            raise RoleError(f"cannot go from {self.state} to {target}")
        self.state = target
        self.since = self._clock()


def lock_key(edge_id: str) -> int:
    """The advisory lock key of ``edge_id``: a signed 64-bit number (PostgreSQL's bigint), the
    same for every Edge of that id, and unlikely to be any other application's key."""
    digest = hashlib.sha256(f"iop-edge leader {edge_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)
