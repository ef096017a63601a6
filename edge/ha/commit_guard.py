"""The check an apply's transaction makes first in HA: that this Edge still leads."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection

from edge.ha.role import NotLeading


@dataclass(frozen=True, slots=True)
class LeaderCommitGuard:
    """Called in an apply's transaction: waits for any takeover's read, then refuses unless the
    lock's session (its server process, ``holder``) still holds the leader lock. Once past this,
    a takeover reads after the commit. Plain values: the apply may commit in another process
    (``refresh.worker_writes``)."""

    config_key: int
    lock_key: int
    holder: int | None

    def __call__(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [self.config_key])
            cursor.execute(
                "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
                "AND pid = %s AND ((classid::bigint << 32) | objid::bigint) = %s",
                [self.holder, self.lock_key],
            )
            if self.holder is None or cursor.fetchone() is None:
                raise NotLeading(
                    "this Edge stopped leading before the apply committed; nothing was applied: "
                    "refresh on the leading Edge"
                )
