"""An upstream's error keeps its hints: its `Retry-After` (seconds or an HTTP date) and its
envelope's `error.code` reach the AdapterError, and from there the run's `error` event."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from nodes import wire
from nodes.agent.adapters import AdapterError
from tests.nodes.agent.test_openai_http_adapter import FakeUpstream, collect, make_adapter


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    fake = FakeUpstream()
    server = await asyncio.start_server(fake.handle, "127.0.0.1", 0)
    fake.base_url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    async with server:
        yield fake


def error_reply(status: int, body: Any, headers: dict[str, str]) -> Any:
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items())

    async def reply(up: FakeUpstream, reader: Any, writer: asyncio.StreamWriter) -> None:
        writer.write(
            f"HTTP/1.1 {status} Nope\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
            + payload
        )
        await writer.drain()

    return reply


def envelope(code: Any) -> dict[str, Any]:
    return {"error": {"message": "slow down", "type": "rate_limit_error", "code": code}}


async def failure(upstream: FakeUpstream, status: int, body: Any, **headers: str) -> AdapterError:
    upstream.chat_reply = error_reply(status, body, headers)
    with pytest.raises(AdapterError) as caught:
        await collect(make_adapter(upstream.base_url))
    return caught.value


async def test_it_keeps_retry_after_in_seconds_and_the_upstreams_code(upstream) -> None:
    error = await failure(upstream, 429, envelope("rate_limit_exceeded"), **{"Retry-After": "2"})

    assert (error.code, error.status) == (wire.ERROR_UPSTREAM, 429)
    assert (error.retry_after, error.upstream_code) == (2.0, "rate_limit_exceeded")


async def test_it_reads_retry_after_as_an_http_date(upstream) -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True)

    error = await failure(upstream, 503, envelope(None), **{"Retry-After": when})

    assert error.retry_after is not None and 100 < error.retry_after <= 120
    assert error.upstream_code is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0.5", 0.5),
        ("-3", 0.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),  # in the past: now
        ("9999999", 86_400.0),  # capped: a hint, not a ban
        ("soon", None),
        ("nan", None),
        ("", None),
    ],
)
async def test_it_keeps_only_a_sane_retry_after(upstream, value: str, expected: Any) -> None:
    error = await failure(upstream, 429, envelope("x"), **{"Retry-After": value})

    assert error.retry_after == expected


@pytest.mark.parametrize(
    "body",
    [envelope(429), envelope("x" * 65), envelope(""), {"error": "flat"}, b"not json", [1]],
)
async def test_it_keeps_only_a_short_string_code(upstream, body: Any) -> None:
    error = await failure(upstream, 400, body)

    assert error.upstream_code is None
    assert error.retry_after is None


async def test_the_hints_make_a_valid_error_event(upstream) -> None:
    error = await failure(
        upstream, 400, envelope("context_length_exceeded"), **{"Retry-After": "1"}
    )

    frame = wire.run_error(
        "r1",
        error.code,
        error.message,
        error.status,
        retry_after=error.retry_after,
        upstream_code=error.upstream_code,
    )
    decoded = wire.decode(wire.encode(frame), accept=wire.NODE_TO_EDGE)
    assert decoded["data"]["upstream_code"] == "context_length_exceeded"
    assert decoded["data"]["retry_after"] == 1.0
