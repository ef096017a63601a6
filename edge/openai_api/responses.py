"""Sending ASGI HTTP responses: JSON, OpenAI errors and server-sent events."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from edge.openai_api.errors import APIError

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
    await send({"type": "http.response.start", "status": status, "headers": [JSON_TYPE, *headers]})
    await send({"type": "http.response.body", "body": body})


async def send_error(send: Send, error: APIError, headers: Headers) -> None:
    await send_json(send, error.status, error.body(), [*headers, *error.retry_headers()])


def sse_event(data: Any) -> bytes:
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"
