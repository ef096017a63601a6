"""A streamed body that goes silent fails `upstream_timeout` after the adapter's timeout_s, with
aiohttp's per-chunk timer off; a stream that keeps talking is never cut by it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nodes.agent.adapters import AdapterError, Done
from nodes.agent.adapters.openai_http import OpenAIHTTPAdapter
from nodes.wire import AdapterSpec
from tests.nodes.agent.test_openai_http_adapter import (
    REQUEST,
    FakeUpstream,
    chunk,
    collect,
    hang_after_one_chunk,
    sse,
    upstream,  # noqa: F401  (the fixture, by import)
)


def adapter(base_url: str, timeout_s: float) -> OpenAIHTTPAdapter:
    spec = AdapterSpec(id="vllm", type="openai_http", base_url=base_url, timeout_s=timeout_s)
    return OpenAIHTTPAdapter(spec, environ={})


async def test_a_stream_silent_past_its_timeout_fails_upstream_timeout(
    upstream: FakeUpstream,  # noqa: F811
) -> None:
    upstream.chat_reply = hang_after_one_chunk

    async with asyncio.timeout(30):  # against a hang only: the limit is 0.2 s
        with pytest.raises(AdapterError) as caught:
            await collect(adapter(upstream.base_url, 0.2))
        await upstream.client_went_away.wait()  # the silent connection was closed

    assert caught.value.code == "upstream_timeout"


async def test_a_stream_that_keeps_talking_outlives_its_timeout(
    upstream: FakeUpstream,  # noqa: F811
) -> None:
    async def steady(up: Any, reader: Any, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
        )
        for index in range(12):  # 0.6 s in all, never 0.05 s apart more than the loop allows
            writer.write(sse(chunk(str(index))))
            await writer.drain()
            await asyncio.sleep(0.05)
        writer.write(sse(chunk(finish="stop"), "[DONE]"))
        await writer.drain()

    upstream.chat_reply = steady

    events = await collect(adapter(upstream.base_url, 2.0), REQUEST)

    assert isinstance(events[-1], Done)
    assert len(events) == 14  # 12 tokens, the closing chunk, done
