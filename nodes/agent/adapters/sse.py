"""Reading an upstream's server-sent events: lines as they arrive, each event's data, as JSON."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import aiohttp
from aiohttp.http_exceptions import LineTooLong

from nodes import wire
from nodes.agent.adapters.base import AdapterError
from nodes.agent.adapters.upstream_errors import error_message
from nodes.wire import json_text

# An event longer than this could not travel even in parts (see wire.MAX_MESSAGE_BYTES).
MAX_EVENT_LINE_BYTES = wire.MAX_MESSAGE_BYTES


async def read_rest(response: aiohttp.ClientResponse) -> None:
    """Read on to the end of the body, so its connection can go back to the pool.

    A stream that delivered ``[DONE]`` is done, whatever follows: a server that then cuts the
    body (llama.cpp ends every stream so) has answered in full.
    """
    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
        async for _ in response.content.iter_any():
            pass


async def event_lines(response: aiohttp.ClientResponse) -> AsyncGenerator[str, None]:
    async with contextlib.aclosing(body_lines(response.content)) as lines:
        async for line in lines:
            yield line.decode("utf-8", errors="replace").rstrip("\r\n")


async def body_lines(content: aiohttp.StreamReader) -> AsyncGenerator[bytes, None]:
    """The body's lines, taken off the connection as they arrive, then its end or its cut.

    aiohttp raises a cut body at the next read even when lines that came before the cut are still
    buffered; a relay held up by the websocket would lose them (llama.cpp cuts every stream right
    after `[DONE]`). A task of its own reads them the moment they arrive. It holds at most what
    the websocket is behind by; the Edge bounds a run's output and cancels it past that.

    A line may be as long as one event the wire carries: a Responses stream's closing events hold
    the whole answer, far past aiohttp's default line limit (128 KiB).
    """
    received: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()

    async def pull() -> None:
        try:
            while line := await content.readline(max_line_length=MAX_EVENT_LINE_BYTES):
                received.put_nowait(line)
        except LineTooLong:
            received.put_nowait(
                AdapterError(
                    wire.ERROR_OUTPUT_TOO_LARGE,
                    f"upstream sent an event line over {MAX_EVENT_LINE_BYTES} bytes",
                )
            )
        except Exception as exc:
            received.put_nowait(exc)
        else:
            received.put_nowait(None)

    puller = asyncio.create_task(pull())
    try:
        while (item := await received.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        puller.cancel()
        # Gone before anyone else reads the body (the rest of a finished stream is read to reuse
        # the connection); a cancel of our own still reaches us here.
        await asyncio.wait([puller])


async def sse_data(lines: AsyncIterator[str]) -> AsyncGenerator[str, None]:
    """The ``data`` of each server-sent event (multi-line data joined; other fields ignored)."""
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
        elif line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


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


async def event_payloads(response: aiohttp.ClientResponse) -> AsyncGenerator[str, None]:
    """The ``data`` of each event of ``response``'s body, as it arrives."""
    async with (
        contextlib.aclosing(event_lines(response)) as lines,
        contextlib.aclosing(sse_data(lines)) as payloads,
    ):
        async for payload in payloads:
            yield payload
