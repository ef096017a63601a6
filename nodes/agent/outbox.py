"""The Node's frames on their way to the Edge: one by one, or in batches once the Edge takes them.

A Node serving many streams has a token to send for many of them in the same turn of its event
loop (the upstreams' chunks arrive together). Sent one by one, each costs a websocket frame on
both sides; the Edge then spends more on framing each one than on the token itself
(docs/benchmarks.md). Once the Edge lists ``"batch"`` in its features, every frame goes through
one writer that sends what has gathered since its last write as one ``batch`` frame (a lone frame
as itself), in the order it was sent. Nothing waits for a batch to fill: the writer goes as soon
as the loop gets to it, so a frame leaves in the same loop turn or the next.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable

from nodes import wire

# Past this many characters queued, senders wait for the writer (the websocket's own buffer
# limits a writer the Edge reads too slowly); they go on below the low mark.
HIGH_WATER_CHARS = 4 * wire.MAX_BATCH_CHARS
LOW_WATER_CHARS = wire.MAX_BATCH_CHARS


class Outbox:
    """Frames for one connection, sent in order through ``send_text``."""

    def __init__(self, send_text: Callable[[str], Awaitable[None]]) -> None:
        self._send_text = send_text
        self._queue: deque[str] = deque()
        self._queued_chars = 0
        self._writer: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._failure: BaseException | None = None

    @property
    def batching(self) -> bool:
        return self._writer is not None

    def start_batching(self) -> None:
        """From now on, frames go out in batches (the Edge said it takes them)."""
        if self._writer is None:
            self._writer = asyncio.create_task(self._write(), name="outbox")

    async def send(self, texts: list[str]) -> None:
        """Send the texts of one frame (several for a frame in parts), after all sent before.

        Raises what the connection raised (``ConnectionClosed``) once it has failed.
        """
        if self._failure is not None:
            raise self._failure
        if self._writer is None:
            for text in texts:
                await self._send_text(text)
            return
        for text in texts:
            self._queue.append(text)
            self._queued_chars += len(text)
        self._idle.clear()
        self._wake.set()
        if self._queued_chars > HIGH_WATER_CHARS:
            self._room.clear()
            await self._room.wait()
            if self._failure is not None:
                raise self._failure

    async def flush(self) -> None:
        """Wait until everything sent so far is written (before closing the connection)."""
        if self._writer is not None and self._failure is None:
            await self._idle.wait()

    async def aclose(self) -> None:
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer

    async def _write(self) -> None:
        try:
            while True:
                if not self._queue:
                    self._idle.set()
                    self._wake.clear()
                    await self._wake.wait()
                texts = self._take()
                await self._send_text(texts[0] if len(texts) == 1 else wire.batch_text(texts))
                if self._queued_chars <= LOW_WATER_CHARS:
                    self._room.set()
        except Exception as exc:  # the connection failed: senders get its error from now on
            self._failure = exc
            self._queue.clear()
            self._room.set()
            self._idle.set()

    def _take(self) -> list[str]:
        """The next batch: frames in order, within the batch limits (a large one alone)."""
        texts: list[str] = []
        chars = 0
        queue = self._queue
        while queue and len(texts) < wire.MAX_BATCH_FRAMES:
            size = len(queue[0])
            if texts and chars + size > wire.MAX_BATCH_CHARS:
                break
            texts.append(queue.popleft())
            chars += size
        self._queued_chars -= chars
        return texts
