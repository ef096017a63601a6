"""Reading an upstream's server-sent events: lines as they arrive, each event's data, as JSON."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import Any

import aiohttp

from nodes import wire
from nodes.agent.adapters.base import AdapterError
from nodes.agent.adapters.upstream_errors import error_message
from nodes.wire import json_text
from nodes.wire.mailbox import Mailbox

# An event longer than this could not travel even in parts (see wire.MAX_MESSAGE_BYTES).
MAX_EVENT_LINE_BYTES = wire.MAX_MESSAGE_BYTES


def check_line_length(line_bytes: int) -> None:
    """Raises AdapterError (``output_too_large``) for a line over MAX_EVENT_LINE_BYTES."""
    if line_bytes > MAX_EVENT_LINE_BYTES:
        raise AdapterError(
            wire.ERROR_OUTPUT_TOO_LARGE,
            f"upstream sent an event line over {MAX_EVENT_LINE_BYTES} bytes",
        )


async def read_rest(response: aiohttp.ClientResponse) -> None:
    """Read on to the end of the body, so its connection can go back to the pool.

    A stream that delivered ``[DONE]`` is done, whatever follows: a server that then cuts the
    body (llama.cpp ends every stream so) has answered in full.
    """
    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
        async for _ in response.content.iter_any():
            pass


class EventSplitter:
    """Server-sent events out of a body's bytes as they arrive: the ``data`` of each complete
    event (multi-line data joined with newlines; other fields and comments ignored).

    Lines end at LF (a CR before it is dropped); the bytes of a line not ended yet wait for the
    next chunk. One call per chunk, however many events it holds: a token's event used to pass
    through four generators line by line, a large part of the Node's CPU per streamed token.
    """

    def __init__(self) -> None:
        self._unended: list[bytes] = []  # the start of a line whose end has not arrived
        self._unended_bytes = 0
        self._data: list[str] = []  # the data lines of the event under way

    def feed(self, chunk: bytes) -> list[str]:
        """The events that ``chunk`` completes. Raises AdapterError (``output_too_large``) at a
        line over MAX_EVENT_LINE_BYTES."""
        if b"\n" not in chunk:
            self._unended.append(chunk)
            self._unended_bytes += len(chunk)
            check_line_length(self._unended_bytes)
            return []
        if self._unended:
            chunk = b"".join((*self._unended, chunk))
            self._unended.clear()
        lines = chunk.split(b"\n")
        rest = lines.pop()
        if rest:
            self._unended.append(rest)
        self._unended_bytes = len(rest)
        check_line_length(self._unended_bytes)
        return self._events(lines)

    def end(self) -> list[str]:
        """The body ended: the events its last line (ended or not) completes."""
        lines = [b"".join(self._unended)] if self._unended else []
        self._unended.clear()
        events = self._events(lines)
        if self._data:
            events.append("\n".join(self._data))
            self._data = []
        return events

    def _events(self, lines: list[bytes]) -> list[str]:
        events = []
        data = self._data
        for raw in lines:
            check_line_length(len(raw))
            line = raw.decode("utf-8", errors="replace").rstrip("\r")
            if not line:
                if data:
                    events.append("\n".join(data))
                    data = self._data = []
            elif line.startswith("data:"):
                value = line[5:]
                data.append(value[1:] if value.startswith(" ") else value)
        return events


async def body_events(content: aiohttp.StreamReader) -> AsyncGenerator[str, None]:
    """The ``data`` of each event of a body, taken off the connection as it arrives, then its
    end or its cut.

    aiohttp raises a cut body at the next read even when data that came before the cut is still
    buffered; a relay held up by the websocket would lose it (llama.cpp cuts every stream right
    after `[DONE]`). A task of its own reads what arrives the moment it does and keeps it as it
    came; the relay splits it into events (``EventSplitter``) as it gets to it. Held as the
    bytes read, a token waiting for the websocket takes about 70 bytes less than as its event's
    text in a list (docs/benchmarks.md). It holds at most what the websocket is behind by; the
    Edge bounds a run's output and cancels it past that, and the reading task stops at a line
    too long for the wire.

    A line may be as long as one event the wire carries: a Responses stream's closing events hold
    the whole answer.
    """
    received: Mailbox[bytes | BaseException | None] = Mailbox()
    splitter = EventSplitter()

    async def pull() -> None:
        unended = 0  # the bytes of the last line since its start, not ended yet
        try:
            while chunk := await content.readany():
                end = chunk.rfind(b"\n")
                unended = unended + len(chunk) if end < 0 else len(chunk) - end - 1
                check_line_length(unended)
                received.put(chunk)
        except Exception as exc:
            received.put(exc)
        else:
            received.put(None)

    puller = asyncio.create_task(pull())
    try:
        while (item := await received.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            for payload in splitter.feed(item):
                yield payload
        for payload in splitter.end():
            yield payload
    finally:
        puller.cancel()
        # Gone before anyone else reads the body (the rest of a finished stream is read to reuse
        # the connection); a cancel of our own still reaches us here.
        await asyncio.wait([puller])


def upstream_object(text: str | bytes, what: str) -> dict[str, Any]:
    """``text`` as the JSON object an upstream sent as ``what`` (an event, an answer), or an
    ``upstream_error``: not JSON, not an object, or an error envelope."""
    try:
        body = json_text.loads(text)
    except ValueError:
        raise AdapterError(wire.ERROR_UPSTREAM, f"upstream sent {what} that is not JSON") from None
    if not isinstance(body, dict):
        raise AdapterError(wire.ERROR_UPSTREAM, f"upstream sent {what} that is not an object")
    if body.get("error"):
        raise AdapterError(wire.ERROR_UPSTREAM, f"upstream error: {error_message(body)}")
    return body


def parse_event(payload: str) -> dict[str, Any]:
    return upstream_object(payload, "an event")


def event_payloads(response: aiohttp.ClientResponse) -> AsyncGenerator[str, None]:
    """The ``data`` of each event of ``response``'s body, as it arrives (``body_events``)."""
    return body_events(response.content)
