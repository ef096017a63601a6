"""Node config acks off the frame path: each Node's latest ack kept in memory, written in batches.

A push to a fleet, or a fleet reconnecting after an Edge restart, brings one ack per Node within
seconds. The recorder keeps each Node's latest ack and hands them to ``write`` (a database writer)
every FLUSH_INTERVAL_S, grouped by revision: one write per batch instead of one per Node.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

log = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 0.5
MAX_BATCH = 500  # Nodes per write


@dataclass(frozen=True, slots=True)
class RevisionAcks:
    """The Nodes that acked ``revision``, and when the last of them did."""

    revision: str
    acked_at: datetime
    node_ids: tuple[str, ...]


class NodeAckRecorder:
    """Collects acks on the event loop and hands batches to ``write``.

    Pending acks are one per Node, and only signed-in Nodes ack, so they are bounded by the
    config's Nodes.
    """

    def __init__(self, write: Callable[[list[RevisionAcks]], Awaitable[None]]) -> None:
        self._write = write
        self._pending: dict[str, tuple[str, datetime]] = {}
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        # One flush at a time: a Node's older ack must not be written after its newer one.
        self._flushing = asyncio.Lock()

    def record(self, node_id: str, revision: str) -> None:
        self._pending[node_id] = (revision, datetime.now(UTC))  # a newer ack replaces an older
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        if len(self._pending) >= MAX_BATCH:
            self._wake.set()

    async def flush(self) -> None:
        """Write the acks recorded now; those arriving meanwhile wait for the next flush."""
        async with self._flushing:
            pending, self._pending = list(self._pending.items()), {}
            for start in range(0, len(pending), MAX_BATCH):
                batch = pending[start : start + MAX_BATCH]
                try:
                    await self._write(_by_revision(batch))
                except Exception:
                    log.exception("node acks: could not write %d acks", len(batch))

    async def _run(self) -> None:
        # Ends once nothing is pending, so an idle Edge has no timer; the next ack starts it again.
        while self._pending:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), FLUSH_INTERVAL_S)
            self._wake.clear()
            await self.flush()


def _by_revision(acks: list[tuple[str, tuple[str, datetime]]]) -> list[RevisionAcks]:
    """Acks as (node id, (revision, acked at)), grouped by revision in the order first seen."""
    groups: dict[str, list[tuple[str, datetime]]] = {}
    for node_id, (revision, acked_at) in acks:
        groups.setdefault(revision, []).append((node_id, acked_at))
    return [
        RevisionAcks(
            revision,
            acked_at=max(acked_at for _, acked_at in group),
            node_ids=tuple(node_id for node_id, _ in group),
        )
        for revision, group in groups.items()
    ]
