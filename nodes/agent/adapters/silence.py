"""How long a streamed body may stay silent, checked without a timer per chunk.

aiohttp's read timeout (``sock_read``) cancels and re-arms a loop timer for every chunk that
arrives: at thousands of streamed tokens a second, a sixth of the Node's time
(docs/benchmarks.md). Once a stream's head is in, ``silence_limit`` turns that timer off for the
rest of the body and looks instead, a few times per limit, whether any byte came since it last
looked; after ``timeout_s`` without one the body fails as aiohttp's own timeout would fail it,
so the adapter answers ``upstream_timeout`` as before. The head, and every answer read whole,
keep aiohttp's timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

import aiohttp
from aiohttp.client_proto import ResponseHandler

# Looks per limit: a silent stream fails between 1 and 1 + 1/CHECKS limits after its last byte.
CHECKS = 4


@contextmanager
def silence_limit(response: aiohttp.ClientResponse, timeout_s: float) -> Iterator[None]:
    """Within the block, ``response``'s body fails after ``timeout_s`` without a byte."""
    connection = response.connection
    protocol = connection.protocol if connection is not None else None
    if protocol is None:  # the body is already in whole: nothing to wait for
        yield
        return
    protocol.read_timeout = None  # aiohttp's per-chunk timer; the next request sets its own
    watch = _Watch(protocol, response.content, timeout_s)
    try:
        yield
    finally:
        watch.handle.cancel()


class _Watch:
    """Looks at the body's byte count every 1/CHECKS of the limit."""

    def __init__(
        self, protocol: ResponseHandler, content: aiohttp.StreamReader, timeout_s: float
    ) -> None:
        self.protocol = protocol
        self.content = content
        self.timeout_s = timeout_s
        self.loop = asyncio.get_running_loop()
        self.seen = content.total_bytes
        self.quiet_since = self.loop.time()
        self.handle = self.loop.call_later(timeout_s / CHECKS, self.look)

    def look(self) -> None:
        now = self.loop.time()
        if self.content.total_bytes != self.seen:
            self.seen, self.quiet_since = self.content.total_bytes, now
        elif now - self.quiet_since >= self.timeout_s:
            timed_out = aiohttp.SocketTimeoutError("Timeout on reading data from socket")
            self.protocol.set_exception(timed_out)  # the connection is not reused
            self.content.set_exception(timed_out)  # the reader waiting for a line gets it
            return
        self.handle = self.loop.call_later(self.timeout_s / CHECKS, self.look)
