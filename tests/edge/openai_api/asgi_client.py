"""Calling the OpenAI ASGI app in process, as daphne would, with a caller that stays connected."""

from __future__ import annotations

import asyncio
from typing import Any

from edge.openai_api import app as app_module


async def post_chat(
    body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> tuple[int, dict[bytes, bytes], bytes]:
    """POST ``body`` to /v1/chat/completions: the status, the response headers, the body."""
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await asyncio.Event().wait()  # the caller stays connected
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "path": "/v1/chat/completions",
        "method": "POST",
        "headers": headers or [],
    }
    await app_module.openai_app(scope, receive, send)
    start = sent[0]
    return start["status"], dict(start["headers"]), b"".join(m.get("body", b"") for m in sent[1:])
