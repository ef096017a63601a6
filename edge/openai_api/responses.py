"""Sending ASGI HTTP responses: JSON, OpenAI errors and server-sent events."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from edge.openai_api.errors import APIError
from nodes.wire import json_text

Send = Callable[[dict[str, Any]], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

JSON_TYPE = (b"content-type", b"application/json")
SSE_HEADERS: Headers = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
SSE_DONE = b"data: [DONE]\n\n"


async def send_json(send: Send, status: int, body: bytes, headers: Headers) -> None:
    # With its length the answer goes out as it is: no chunked framing for the server to write
    # around it, nor for the client to take apart.
    length = (b"content-length", b"%d" % len(body))
    start = [JSON_TYPE, length, *headers]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": body})


async def send_error(send: Send, error: APIError, headers: Headers) -> None:
    await send_json(send, error.status, error.body(), [*headers, *error.retry_headers()])


def sse_event(data: Any) -> bytes:
    return b"data: " + json_text.dumps_bytes(data) + b"\n\n"
