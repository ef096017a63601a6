"""Usage metering off the hot path: finished requests queue in memory, written in batches."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

log = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 0.5
MAX_BATCH = 500
MAX_PENDING = 100_000


@dataclass(slots=True)
class Usage:
    """What one request used; the fields of `edge.models.UsageRecord`."""

    request_id: str
    model: str
    status: str
    # The OpenAI endpoint: chat.completions, completions, embeddings or responses.
    endpoint: str = "chat.completions"
    principal_ref: str = ""
    token_ref: str = ""
    alias: str = ""
    provider: str = ""
    node: str = ""
    context_class: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    queue_ms: float = 0.0
    total_ms: float = 0.0
    # Providers the run went to (failover), comma-separated in order; the last one is `provider`.
    attempts: int = 0
    providers_tried: str = ""
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))


class UsageRecorder:
    """Collects usage on the event loop and hands batches to ``write`` (a database writer)."""

    def __init__(
        self,
        write: Callable[[list[Usage]], Awaitable[None]],
        on_quiet: Callable[[], object] | None = None,
    ) -> None:
        self._write = write
        # Called once when traffic stops: the first flush interval with nothing to write.
        self._on_quiet = on_quiet
        self._pending: list[Usage] = []
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self.dropped = 0

    def record(self, usage: Usage) -> None:
        if len(self._pending) >= MAX_PENDING:
            self.dropped += 1  # the database is far behind; keep serving rather than grow
            return
        self._pending.append(usage)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        if len(self._pending) >= MAX_BATCH:
            self._wake.set()

    async def flush(self) -> None:
        """Write what is recorded now; what arrives meanwhile waits for the next flush.

        Taking a snapshot keeps a slow database from turning the writer into a busy loop of
        tiny batches.
        """
        pending, self._pending = self._pending, []
        for start in range(0, len(pending), MAX_BATCH):
            batch = pending[start : start + MAX_BATCH]
            try:
                await self._write(batch)
            except Exception:
                log.exception("usage: could not write %d records", len(batch))

    async def _run(self) -> None:
        busy = False
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), FLUSH_INTERVAL_S)
            self._wake.clear()
            if self._pending:
                busy = True
                await self.flush()
            elif busy:
                busy = False
                if self._on_quiet is not None:
                    self._on_quiet()
