from __future__ import annotations

import asyncio
import json
import math
import socket
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any
from unittest import mock

import aiohttp
import pytest

from nodes.agent.adapters import AdapterError, Delta, Done, Response
from nodes.agent.adapters import sse as sse_module
from nodes.agent.adapters.openai_http import OpenAIHTTPAdapter
from nodes.agent.adapters.sse import body_events
from nodes.wire import AdapterSpec

Reply = Callable[["FakeUpstream", asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def chunk(content: str | None = None, finish: str | None = None, **delta: Any) -> dict[str, Any]:
    if content is not None:
        delta["content"] = content
    return {
        "id": "chatcmpl-up",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "llama",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


USAGE = {
    "prompt_tokens": 11,
    "completion_tokens": 2,
    "total_tokens": 13,
    "prompt_tokens_details": {"cached_tokens": 8},
    "completion_tokens_details": {"reasoning_tokens": 1},
}


def usage_chunk(**usage: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-up",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "llama",
        "choices": [],
        "usage": {**USAGE, **usage},
    }


USAGE_CHUNK = usage_chunk()


def sse(*events: Any) -> bytes:
    body = "".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events)
    return body.encode()


def stream_reply(*events: Any) -> Reply:
    async def reply(up: FakeUpstream, reader: Any, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
        )
        writer.write(sse(*events))
        await writer.drain()

    return reply


def chunked_stream_reply(*events: Any, cut: bool = False) -> Reply:
    """SSE in HTTP chunks on a keep-alive connection; ``cut`` drops it before the last chunk."""

    async def reply(up: FakeUpstream, reader: Any, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        for event in events:
            data = sse(event)
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        if not cut:
            writer.write(b"0\r\n\r\n")
        await writer.drain()

    return reply


def json_reply(status: int, body: bytes, content_type: str = "application/json") -> Reply:
    async def reply(up: FakeUpstream, reader: Any, writer: asyncio.StreamWriter) -> None:
        writer.write(
            f"HTTP/1.1 {status} Whatever\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()

    return reply


async def hang_after_one_chunk(
    up: FakeUpstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
    writer.write(sse(chunk("first")))
    await writer.drain()
    # Reading returns b"" only when the client closes its side of the connection.
    await reader.read()
    up.client_went_away.set()


class FakeUpstream:
    """A tiny OpenAI-compatible HTTP server on a real socket."""

    def __init__(self) -> None:
        self.base_url = ""
        self.requests: list[dict[str, Any]] = []
        self.chat_reply: Reply = stream_reply(chunk("hi"), chunk(finish="stop"), "[DONE]")
        self.models_status = 200
        self.probe_path = "/models"
        self.client_went_away = asyncio.Event()
        self.keep_alive = False  # serve further requests on the same connection
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode()
                request_line, *header_lines = head.strip().split("\r\n")
                method, path, _ = request_line.split(" ")
                headers = dict(line.split(": ", 1) for line in header_lines)
                headers = {k.lower(): v for k, v in headers.items()}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.requests.append(
                    {
                        "method": method,
                        "path": path,
                        "headers": headers,
                        "json": json.loads(body) if body else None,
                        "body": body,
                    }
                )
                if path.endswith(self.probe_path):
                    payload = b'{"object": "list", "data": []}'
                    writer.write(
                        f"HTTP/1.1 {self.models_status} X\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(payload)}\r\n\r\n".encode()
                        + payload
                    )
                    await writer.drain()
                    continue
                await self.chat_reply(self, reader, writer)
                if not self.keep_alive:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    fake = FakeUpstream()
    server = await asyncio.start_server(fake.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    fake.base_url = f"http://127.0.0.1:{port}/v1"
    async with server:
        yield fake


def make_adapter(
    base_url: str, environ: dict[str, str] | None = None, **options: Any
) -> OpenAIHTTPAdapter:
    spec = AdapterSpec(
        id="vllm",
        type="openai_http",
        base_url=base_url,
        api_key_env="UPSTREAM_KEY",
        timeout_s=5.0,
        health_interval_s=1.0,
        **options,
    )
    return OpenAIHTTPAdapter(spec, environ={} if environ is None else environ)


REQUEST = {
    "model": "llama",
    "stream": True,
    "messages": [{"role": "user", "content": "say hello"}],
}


async def collect(adapter: OpenAIHTTPAdapter, request: dict[str, Any] = REQUEST) -> list[Any]:
    try:
        return [event async for event in adapter.stream(request, "llama-3-8b")]
    finally:
        await adapter.aclose()


async def test_it_relays_each_chunk_as_sent_and_lifts_the_usage_into_done(
    upstream: FakeUpstream,
) -> None:
    logprobs = {"content": [{"token": "hmm", "logprob": -0.1, "bytes": [104, 109, 109]}]}
    thinking = chunk(reasoning_content="hmm")
    thinking["choices"][0]["logprobs"] = logprobs
    finish = {**chunk(finish="stop"), "system_fingerprint": "fp_1"}
    upstream.chat_reply = stream_reply(
        chunk("", role="assistant"),
        chunk("Hel"),
        {**chunk("lo"), "usage": None},
        thinking,
        finish,
        USAGE_CHUNK,
        "[DONE]",
    )
    events = await collect(make_adapter(upstream.base_url, {"UPSTREAM_KEY": "sk-test"}))

    assert [e.chunk for e in events[:-1]] == [
        chunk("", role="assistant"),
        chunk("Hel"),
        chunk("lo"),  # its usage key taken out
        thinking,
        finish,  # the upstream's own closing chunk
    ]
    assert events[-1] == Done(USAGE, "stop", finish_sent=True)
    sent = upstream.requests[0]
    assert (sent["method"], sent["path"]) == ("POST", "/v1/chat/completions")
    assert sent["headers"]["authorization"] == "Bearer sk-test"
    assert sent["json"]["model"] == "llama-3-8b"
    assert sent["json"]["stream"] is True
    assert sent["json"]["stream_options"] == {"include_usage": True}
    assert sent["json"]["messages"] == REQUEST["messages"]


async def test_it_keeps_only_the_last_of_several_usage_reports(upstream: FakeUpstream) -> None:
    # LiteLLM sends two usage chunks; a server may also put usage on a content chunk.
    upstream.chat_reply = stream_reply(
        {**chunk("a"), "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}},
        chunk(finish="stop"),
        usage_chunk(completion_tokens=3, total_tokens=14),
        usage_chunk(),
        "[DONE]",
    )
    events = await collect(make_adapter(upstream.base_url))

    assert [e.chunk for e in events[:-1]] == [chunk("a"), chunk(finish="stop")]
    assert events[-1] == Done(USAGE, "stop", finish_sent=True)


async def test_it_relays_every_choice_of_n_and_reports_the_first_ones_finish(
    upstream: FakeUpstream,
) -> None:
    def choices(*items: dict[str, Any]) -> dict[str, Any]:
        return {**chunk(), "choices": list(items)}

    def choice(index: int, finish: str | None = None, **delta: Any) -> dict[str, Any]:
        return {"index": index, "delta": delta, "finish_reason": finish}

    replies = [
        choices(choice(0, content="a"), choice(1, content="b")),
        choices(choice(1, "length")),
        choices(choice(0, "stop")),
    ]
    upstream.chat_reply = stream_reply(*replies, "[DONE]")
    events = await collect(make_adapter(upstream.base_url), {**REQUEST, "n": 2})

    assert [e.chunk for e in events[:-1]] == replies
    assert (events[-1].finish_reason, events[-1].finish_sent) == ("stop", True)
    assert upstream.requests[0]["json"]["n"] == 2


async def test_it_sends_a_non_streaming_request_as_one_and_answers_with_the_whole_completion(
    upstream: FakeUpstream,
) -> None:
    completion = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "llama-3-8b",
        "system_fingerprint": "fp_1",
        "service_tier": "default",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Hello",
                    "reasoning_content": "greet",
                    "refusal": None,
                },
                "logprobs": {"content": [{"token": "Hello", "logprob": -0.2}]},
                "finish_reason": "length",
            }
        ],
        "usage": USAGE,
    }
    upstream.chat_reply = json_reply(200, json.dumps(completion).encode())
    request = {**REQUEST, "stream": False, "stream_options": {"include_usage": True}}

    events = await collect(make_adapter(upstream.base_url), request)

    assert events == [Response(completion), Done(USAGE, "length")]
    sent = upstream.requests[0]["json"]
    assert sent["stream"] is False and "stream_options" not in sent


@pytest.mark.parametrize(
    ("content", "written_as"),
    [("héllo wörld", "héllo wörld".encode()), ("héllo \ud800 wörld", b"\\ud800")],
)
async def test_the_request_goes_upstream_as_json_in_valid_utf8(
    upstream: FakeUpstream, content: str, written_as: bytes
) -> None:
    request = {**REQUEST, "messages": [{"role": "user", "content": content}]}

    await collect(make_adapter(upstream.base_url), request)

    sent = upstream.requests[0]
    assert sent["headers"]["content-type"] == "application/json"
    assert sent["json"]["messages"] == [{"role": "user", "content": content}]
    sent["body"].decode()  # valid UTF-8: non-ASCII kept, a lone surrogate escaped
    assert written_as in sent["body"]


async def test_it_estimates_the_usage_of_a_completion_that_reports_none(
    upstream: FakeUpstream,
) -> None:
    completion = {
        "id": "c",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "x" * 10}}],
    }
    upstream.chat_reply = json_reply(200, json.dumps(completion).encode())
    events = await collect(make_adapter(upstream.base_url), {**REQUEST, "stream": False})
    prompt = math.ceil(len("say hello") / 4)
    assert events[-1] == Done(
        {"prompt_tokens": prompt, "completion_tokens": 3, "total_tokens": prompt + 3}, "stop"
    )


@pytest.mark.parametrize("body", [b'{"object": "list", "data": []}', b'{"choices": {}}'])
async def test_it_fails_a_completion_without_a_choices_list(
    upstream: FakeUpstream, body: bytes
) -> None:
    upstream.chat_reply = json_reply(200, body)
    with pytest.raises(AdapterError, match="without a choices list"):
        await collect(make_adapter(upstream.base_url), {**REQUEST, "stream": False})


async def test_it_sends_no_auth_header_when_the_key_variable_is_unset(
    upstream: FakeUpstream,
) -> None:
    await collect(make_adapter(upstream.base_url))
    assert "authorization" not in upstream.requests[0]["headers"]


async def test_it_estimates_usage_when_upstream_sends_none(upstream: FakeUpstream) -> None:
    upstream.chat_reply = stream_reply(
        chunk("", role="assistant"), chunk("x"), chunk("y"), chunk("z", finish="stop")
    )
    events = await collect(make_adapter(upstream.base_url))
    prompt = math.ceil(len("say hello") / 4)
    assert events[-1] == Done(
        {"prompt_tokens": prompt, "completion_tokens": 3, "total_tokens": prompt + 3},
        "stop",
        finish_sent=True,
    )


async def test_a_stream_that_delivered_done_is_complete_though_the_body_is_then_cut(
    upstream: FakeUpstream,
) -> None:
    # llama.cpp: content, [DONE], and the connection dropped without the last HTTP chunk.
    upstream.chat_reply = chunked_stream_reply(
        chunk("", role="assistant"), chunk("all"), chunk(" there"), "[DONE]", cut=True
    )
    events = await collect(make_adapter(upstream.base_url))
    assert [e.chunk["choices"][0]["delta"] for e in events[:-1]] == [
        {"role": "assistant", "content": ""},
        {"content": "all"},
        {"content": " there"},
    ]
    assert isinstance(events[-1], Done)
    assert (events[-1].finish_reason, events[-1].finish_sent) == ("stop", False)


async def test_a_stream_whose_every_choice_finished_is_complete_though_the_body_is_then_cut(
    upstream: FakeUpstream,
) -> None:
    upstream.chat_reply = chunked_stream_reply(chunk("all"), chunk(finish="stop"), cut=True)
    events = await collect(make_adapter(upstream.base_url))
    prompt = math.ceil(len("say hello") / 4)
    assert events[-1] == Done(
        {"prompt_tokens": prompt, "completion_tokens": 1, "total_tokens": prompt + 1},
        "stop",
        finish_sent=True,
    )


async def test_a_stream_cut_before_it_finished_fails(upstream: FakeUpstream) -> None:
    upstream.chat_reply = chunked_stream_reply(chunk("all"), chunk(" the"), cut=True)
    with pytest.raises(AdapterError) as caught:
        await collect(make_adapter(upstream.base_url))
    assert caught.value.code == "upstream_error"


async def test_it_reads_a_finished_stream_to_its_end_and_reuses_the_connection(
    upstream: FakeUpstream,
) -> None:
    upstream.keep_alive = True
    upstream.chat_reply = chunked_stream_reply(chunk("a"), chunk(finish="stop"), "[DONE]")
    adapter = make_adapter(upstream.base_url)
    try:
        for _ in range(3):
            events = [event async for event in adapter.stream(REQUEST, "llama")]
            assert isinstance(events[-1], Done)
    finally:
        await adapter.aclose()
    assert (len(upstream.requests), upstream.connections) == (3, 1)


@pytest.mark.parametrize(
    ("param", "limits", "sent"),
    [
        ("max_tokens", {"max_completion_tokens": 7}, {"max_tokens": 7}),
        ("max_tokens", {"max_completion_tokens": None, "max_tokens": 9}, {"max_tokens": 9}),
        ("max_tokens", {"max_completion_tokens": 7, "max_tokens": 9}, {"max_tokens": 7}),
        ("max_tokens", {}, {}),
        ("max_completion_tokens", {"max_tokens": 9}, {"max_completion_tokens": 9}),
        (None, {"max_completion_tokens": 7}, {"max_completion_tokens": 7}),
        (None, {"max_tokens": 9}, {"max_tokens": 9}),
    ],
)
async def test_max_tokens_param_sends_the_callers_limit_under_that_name(
    upstream: FakeUpstream, param: str | None, limits: dict[str, Any], sent: dict[str, Any]
) -> None:
    await collect(make_adapter(upstream.base_url, max_tokens_param=param), {**REQUEST, **limits})
    body = upstream.requests[0]["json"]
    assert {k: body[k] for k in ("max_tokens", "max_completion_tokens") if k in body} == sent


async def test_it_fails_a_stream_that_ends_before_completion(upstream: FakeUpstream) -> None:
    upstream.chat_reply = stream_reply(chunk("partial"))
    with pytest.raises(AdapterError) as caught:
        await collect(make_adapter(upstream.base_url))
    assert caught.value.code == "upstream_error"
    assert "ended before completion" in caught.value.message


async def test_it_fails_on_an_error_event_in_the_stream(upstream: FakeUpstream) -> None:
    upstream.chat_reply = stream_reply(chunk("a"), {"error": {"message": "model crashed"}})
    with pytest.raises(AdapterError, match="model crashed"):
        await collect(make_adapter(upstream.base_url))


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (
            400,
            b'{"error": {"message": "max_tokens is too large", "type": "invalid_request_error"}}',
            "upstream HTTP 400: max_tokens is too large",
        ),
        (404, b'{"detail": "Not Found"}', "upstream HTTP 404: Not Found"),
        (503, b"overloaded, try later", "upstream HTTP 503: overloaded, try later"),
        (500, b"", "upstream HTTP 500: Whatever"),
    ],
)
async def test_it_reports_upstream_http_errors_with_status_and_message(
    upstream: FakeUpstream, status: int, body: bytes, message: str
) -> None:
    upstream.chat_reply = json_reply(status, body)
    with pytest.raises(AdapterError) as caught:
        await collect(make_adapter(upstream.base_url))
    assert (caught.value.code, caught.value.status, caught.value.message) == (
        "upstream_error",
        status,
        message,
    )


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_it_reports_a_refused_connection_as_upstream_unavailable() -> None:
    with pytest.raises(AdapterError) as caught:
        await collect(make_adapter(f"http://127.0.0.1:{closed_port()}/v1"))
    assert caught.value.code == "upstream_unavailable"
    assert caught.value.status is None


async def test_an_unreachable_upstream_is_named_without_its_userinfo_or_query() -> None:
    port = closed_port()
    with pytest.raises(AdapterError) as caught:
        await collect(make_adapter(f"http://me:sk-PLANTED@127.0.0.1:{port}/v1?key=sk-PLANTED"))
    assert caught.value.message.startswith(f"cannot reach http://127.0.0.1:{port}/v1: ")
    assert "sk-PLANTED" not in caught.value.message


async def test_cancelling_a_run_closes_the_upstream_connection(upstream: FakeUpstream) -> None:
    upstream.chat_reply = hang_after_one_chunk
    adapter = make_adapter(upstream.base_url)
    first_delta = asyncio.Event()

    async def consume() -> None:
        async for event in adapter.stream(REQUEST, "llama"):
            if isinstance(event, Delta):
                first_delta.set()

    task = asyncio.create_task(consume())
    async with asyncio.timeout(5):
        await first_delta.wait()
    task.cancel()
    async with asyncio.timeout(5):
        await upstream.client_went_away.wait()
    assert task.cancelled()
    await adapter.aclose()


async def test_its_probe_is_healthy_on_a_2xx_from_models(upstream: FakeUpstream) -> None:
    adapter = make_adapter(upstream.base_url, {"UPSTREAM_KEY": "sk-test"})
    try:
        assert await adapter.probe() == (True, "GET /models: HTTP 200")
        upstream.models_status = 500
        assert await adapter.probe() == (False, "GET /models: HTTP 500")
    finally:
        await adapter.aclose()
    assert [r["path"] for r in upstream.requests] == ["/v1/models", "/v1/models"]
    assert upstream.requests[0]["headers"]["authorization"] == "Bearer sk-test"
    assert adapter.probe_interval_s == 1.0


async def test_its_probe_goes_to_the_configured_health_path(upstream: FakeUpstream) -> None:
    upstream.probe_path = "/health"
    adapter = make_adapter(upstream.base_url, health_path="/health")
    try:
        assert await adapter.probe() == (True, "GET /health: HTTP 200")
    finally:
        await adapter.aclose()
    assert [r["path"] for r in upstream.requests] == ["/v1/health"]


async def test_without_a_probe_it_is_healthy_once_and_for_all(upstream: FakeUpstream) -> None:
    adapter = make_adapter(upstream.base_url, health_path=False)
    try:
        assert await adapter.probe() == (True, "not probed (health_path: false)")
    finally:
        await adapter.aclose()
    assert adapter.probe_interval_s is None
    assert upstream.requests == []


async def test_its_probe_is_unhealthy_when_upstream_is_unreachable() -> None:
    adapter = make_adapter(f"http://127.0.0.1:{closed_port()}/v1")
    healthy, detail = await adapter.probe()
    await adapter.aclose()
    assert not healthy
    assert detail.startswith("GET /models failed:")


async def a_body_whose_reader_took_its_first_event() -> tuple[
    aiohttp.StreamReader, AsyncGenerator[str, None]
]:
    """A body as aiohttp reads it, and its events, the first ("all") read already."""
    content = aiohttp.StreamReader(
        mock.Mock(_reading_paused=False), 2**16, loop=asyncio.get_running_loop()
    )
    payloads = body_events(content)
    first = asyncio.ensure_future(anext(payloads))
    content.feed_data(b"data: all\n\n")
    assert await first == "all"
    return content, payloads


async def test_lines_received_before_a_cut_survive_a_reader_that_was_busy_elsewhere() -> None:
    # aiohttp raises a cut at the next read even with lines still buffered; the relay may be
    # held up by the websocket exactly then (llama.cpp cuts every stream right after [DONE]).
    content, payloads = await a_body_whose_reader_took_its_first_event()
    # The reader is busy: more arrives, then the cut, before it asks again.
    content.feed_data(b"data: [DONE]\n\n")
    await asyncio.sleep(0)  # one loop turn: the connection's data is handled before its close
    content.set_exception(aiohttp.ClientPayloadError("Response payload is not completed"))

    rest = []
    with pytest.raises(aiohttp.ClientPayloadError):
        async for payload in payloads:
            rest.append(payload)
    assert rest == ["[DONE]"]


async def test_a_line_too_long_for_the_wire_stops_the_reading_while_the_reader_is_busy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sse_module, "MAX_EVENT_LINE_BYTES", 1024)
    content, payloads = await a_body_whose_reader_took_its_first_event()
    # The reader is busy; a line grows past the bound, in pieces, and more follows.
    for _ in range(3):
        content.feed_data(b"data: " + b"x" * 500)
        await asyncio.sleep(0)
    content.feed_data(b"left unread")
    await asyncio.sleep(0)

    with pytest.raises(AdapterError) as caught:
        await anext(payloads)
    assert caught.value.code == "output_too_large"
    assert caught.value.message == "upstream sent an event line over 1024 bytes"
    assert content.read_nowait() == b"left unread"


async def test_a_chunk_longer_than_aiohttps_default_line_limit_is_relayed(
    upstream: FakeUpstream,
) -> None:
    long = "x" * (300 * 1024)  # aiohttp refuses lines over 128 KiB unless told otherwise
    upstream.chat_reply = stream_reply(chunk(long), chunk(finish="stop"), "[DONE]")
    events = await collect(make_adapter(upstream.base_url))
    assert events[0].chunk["choices"][0]["delta"]["content"] == long


async def test_an_event_line_too_long_for_the_wire_fails_the_run_as_output_too_large(
    upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sse_module, "MAX_EVENT_LINE_BYTES", 1024)
    upstream.chat_reply = stream_reply(chunk("x" * 2048), chunk(finish="stop"), "[DONE]")
    with pytest.raises(AdapterError) as caught:
        await collect(make_adapter(upstream.base_url))
    assert caught.value.code == "output_too_large"
    assert caught.value.message == "upstream sent an event line over 1024 bytes"


# -- the other endpoints -------------------------------------------------------------------------

RESPONSE = {"id": "resp_1", "object": "response", "status": "completed", "output": []}


def response_event(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, **fields}


async def run_on(
    upstream: FakeUpstream, endpoint: str, request: dict[str, Any], target: str = "m"
) -> list[Any]:
    adapter = make_adapter(upstream.base_url)
    try:
        return [event async for event in adapter.stream(request, target, endpoint)]  # type: ignore[arg-type]
    finally:
        await adapter.aclose()


async def test_a_response_stream_without_usage_is_estimated(upstream: FakeUpstream) -> None:
    upstream.chat_reply = stream_reply(
        response_event("response.created", response={**RESPONSE, "status": "in_progress"}),
        response_event("response.output_text.delta", delta="Hel"),
        response_event("response.output_text.delta", delta="lo"),
        response_event("response.incomplete", response={**RESPONSE, "status": "incomplete"}),
    )
    events = await run_on(upstream, "responses", {"input": "abcdefgh", "stream": True})
    assert [e.chunk["type"] for e in events[:-1]] == [
        "response.created",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.incomplete",
    ]
    assert events[-1] == Done(
        {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}, "incomplete", True
    )
    assert upstream.requests[0]["path"] == "/v1/responses"
    assert upstream.requests[0]["json"] == {"input": "abcdefgh", "stream": True, "model": "m"}


async def test_a_failed_response_is_relayed_and_ends_the_run(upstream: FakeUpstream) -> None:
    failed = {**RESPONSE, "status": "failed", "error": {"code": "server_error", "message": "x"}}
    upstream.chat_reply = stream_reply(response_event("response.failed", response=failed))
    events = await run_on(upstream, "responses", {"input": "a", "stream": True})
    assert events[0].chunk["response"]["error"]["code"] == "server_error"
    assert events[-1].finish_reason == "failed"


async def test_a_response_stream_that_ends_before_its_last_event_fails(
    upstream: FakeUpstream,
) -> None:
    upstream.chat_reply = stream_reply(response_event("response.output_text.delta", delta="a"))
    with pytest.raises(AdapterError) as caught:
        await run_on(upstream, "responses", {"input": "a", "stream": True})
    assert (caught.value.code, caught.value.message) == (
        "upstream_error",
        "upstream stream ended before completion",
    )


async def test_a_response_streamed_unasked_is_relayed_as_a_stream(upstream: FakeUpstream) -> None:
    upstream.chat_reply = stream_reply(response_event("response.completed", response=RESPONSE))
    events = await run_on(upstream, "responses", {"input": "a"})
    assert isinstance(events[0], Delta)
    assert upstream.requests[0]["json"]["stream"] is False


@pytest.mark.parametrize(
    ("endpoint", "answer", "message"),
    [
        ("embeddings", {"object": "list"}, "upstream answered without a data list"),
        ("responses", {"object": "response"}, "upstream answered without a output list"),
        ("completions", {"object": "text_completion"}, "upstream answered without a choices list"),
    ],
)
async def test_a_whole_answer_without_its_list_fails(
    upstream: FakeUpstream, endpoint: str, answer: dict[str, Any], message: str
) -> None:
    upstream.chat_reply = json_reply(200, json.dumps(answer).encode())
    with pytest.raises(AdapterError) as caught:
        await run_on(upstream, endpoint, {"input": "a", "prompt": "a"})
    assert (caught.value.code, caught.value.message) == ("upstream_error", message)


async def test_embeddings_without_usage_are_estimated_and_sent_without_stream(
    upstream: FakeUpstream,
) -> None:
    answer = {"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [1.0]}]}
    upstream.chat_reply = json_reply(200, json.dumps(answer).encode())
    events = await run_on(upstream, "embeddings", {"input": "abcdefgh", "stream": True})
    assert events == [
        Response(answer),
        Done({"prompt_tokens": 2, "completion_tokens": 0, "total_tokens": 2}, "stop"),
    ]
    assert upstream.requests[0]["json"] == {"input": "abcdefgh", "stream": True, "model": "m"}
