"""The openai_http adapter's completions, embeddings and Responses runs against the scripted
upstream process (``upstream_server``), which answers as vLLM, llama.cpp and LiteLLM do."""

from __future__ import annotations

import asyncio
import base64
import json
import struct
from typing import Any

import pytest

from nodes import wire
from nodes.agent.adapters import AdapterError, Delta, Done, Response
from nodes.agent.adapters.openai_http import OpenAIHTTPAdapter
from tests.e2e.conftest import ScriptedUpstream


def adapter(upstream: ScriptedUpstream) -> OpenAIHTTPAdapter:
    spec = wire.AdapterSpec(id="up", type="openai_http", base_url=upstream.base_url, timeout_s=30.0)
    return OpenAIHTTPAdapter(spec, environ={})


async def run(
    upstream: ScriptedUpstream, endpoint: wire.Endpoint, target: str, **body: Any
) -> list[Any]:
    relay = adapter(upstream)
    try:
        return [event async for event in relay.stream(body, target, endpoint)]
    finally:
        await relay.aclose()


def last_sent(upstream: ScriptedUpstream) -> dict[str, Any]:
    return upstream.requests()[-1]


# -- completions ---------------------------------------------------------------------------------


async def test_a_streamed_completion_is_relayed_chunk_by_chunk_with_the_upstreams_usage(
    scripted_upstream: ScriptedUpstream,
) -> None:
    events = await run(scripted_upstream, "completions", "ok", prompt="hi there", stream=True)
    chunks = [e.chunk for e in events if isinstance(e, Delta)]
    assert "".join(c["choices"][0]["text"] for c in chunks) == "echo: hi there"
    assert {c["object"] for c in chunks} == {"text_completion"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"  # the upstream's closing chunk
    assert all("usage" not in c for c in chunks)
    done = events[-1]
    assert (done.usage["prompt_tokens"], done.usage["completion_tokens"]) == (2, 3)
    assert (done.finish_reason, done.finish_sent) == ("stop", True)
    sent = last_sent(scripted_upstream)
    assert sent["path"] == "/v1/completions"
    assert sent["body"]["stream_options"] == {"include_usage": True}


async def test_a_whole_completion_comes_back_as_the_upstream_sent_it(
    scripted_upstream: ScriptedUpstream,
) -> None:
    [response, done] = await run(scripted_upstream, "completions", "ok", prompt="hi there")
    assert isinstance(response, Response)
    assert response.completion["object"] == "text_completion"
    assert response.completion["choices"][0]["text"] == "echo: hi there"
    assert response.completion["system_fingerprint"] == "fp_scripted"
    assert done.usage["total_tokens"] == response.completion["usage"]["total_tokens"]
    assert last_sent(scripted_upstream)["body"]["stream"] is False


async def test_a_big_streamed_completion_arrives_whole(scripted_upstream: ScriptedUpstream) -> None:
    size = 3 * 1024 * 1024
    events = await run(scripted_upstream, "completions", f"big-{size}", prompt="x", stream=True)
    text = "".join(e.chunk["choices"][0]["text"] for e in events if isinstance(e, Delta))
    assert len(text) == size
    assert isinstance(events[-1], Done)


async def test_a_completion_stream_cut_after_done_is_complete(
    scripted_upstream: ScriptedUpstream,
) -> None:
    events = await run(
        scripted_upstream, "completions", "cut-after-done", prompt="a b", stream=True
    )
    assert "".join(e.chunk["choices"][0]["text"] for e in events[:-1]) == "echo: a b"
    assert events[-1].finish_reason == "stop"


# -- embeddings ----------------------------------------------------------------------------------


async def test_embeddings_are_relayed_whole_with_their_input_tokens(
    scripted_upstream: ScriptedUpstream,
) -> None:
    [response, done] = await run(
        scripted_upstream, "embeddings", "ok", input=["one", "two words"], dimensions=3
    )
    answer = response.completion
    assert answer["object"] == "list"
    assert [len(d["embedding"]) for d in answer["data"]] == [3, 3]
    assert done == Done({"prompt_tokens": 3, "completion_tokens": 0, "total_tokens": 3}, "stop")
    sent = last_sent(scripted_upstream)
    assert sent["path"] == "/v1/embeddings"
    assert sent["body"] == {"input": ["one", "two words"], "dimensions": 3, "model": "ok"}


async def test_base64_embeddings_pass_through_untouched(
    scripted_upstream: ScriptedUpstream,
) -> None:
    [response, _] = await run(
        scripted_upstream, "embeddings", "ok", input="abc", encoding_format="base64"
    )
    encoded = response.completion["data"][0]["embedding"]
    assert len(struct.unpack("<4f", base64.b64decode(encoded))) == 4


async def test_big_embeddings_arrive_whole(scripted_upstream: ScriptedUpstream) -> None:
    size = 2 * 1024 * 1024
    [response, _] = await run(scripted_upstream, "embeddings", f"big-{size}", input="x")
    assert len(json.dumps(response.completion)) > size * 0.9


# -- responses -----------------------------------------------------------------------------------


async def test_a_streamed_response_relays_each_event_as_is(
    scripted_upstream: ScriptedUpstream,
) -> None:
    events = await run(scripted_upstream, "responses", "ok", input="hello you", stream=True)
    data = [e.chunk for e in events if isinstance(e, Delta)]
    assert [d["type"] for d in data][:2] == ["response.created", "response.in_progress"]
    assert data[-1]["type"] == "response.completed"
    assert [d["sequence_number"] for d in data] == list(range(len(data)))
    deltas = [d["delta"] for d in data if d["type"] == "response.output_text.delta"]
    assert "".join(deltas) == "echo: hello you"
    usage = data[-1]["response"]["usage"]
    done = events[-1]
    assert (done.usage["prompt_tokens"], done.usage["completion_tokens"]) == (
        usage["input_tokens"],
        usage["output_tokens"],
    )
    assert done.usage["prompt_tokens_details"] == usage["input_tokens_details"]
    assert (done.finish_reason, done.finish_sent) == ("completed", True)
    sent = last_sent(scripted_upstream)
    assert sent["path"] == "/v1/responses"
    assert "stream_options" not in sent["body"]


async def test_a_whole_response_is_the_upstreams_response_object(
    scripted_upstream: ScriptedUpstream,
) -> None:
    [response, done] = await run(
        scripted_upstream, "responses", "ok", input="hi", previous_response_id="resp_abc"
    )
    answer = response.completion
    assert answer["object"] == "response"
    assert answer["previous_response_id"] == "resp_abc"
    assert done.usage["completion_tokens"] == answer["usage"]["output_tokens"]
    assert done.finish_reason == "completed"


async def test_a_big_streamed_response_arrives_whole(scripted_upstream: ScriptedUpstream) -> None:
    size = 3 * 1024 * 1024
    events = await run(scripted_upstream, "responses", f"big-{size}", input="x", stream=True)
    deltas = [e.chunk for e in events if isinstance(e, Delta)]
    text = "".join(d["delta"] for d in deltas if d["type"] == "response.output_text.delta")
    assert len(text) == size


async def test_a_response_stream_cut_after_its_last_event_is_complete(
    scripted_upstream: ScriptedUpstream,
) -> None:
    events = await run(scripted_upstream, "responses", "cut-after-done", input="a", stream=True)
    assert events[-2].chunk["type"] == "response.completed"
    assert events[-1].finish_reason == "completed"


async def test_an_error_event_fails_the_run_with_the_upstreams_code(
    scripted_upstream: ScriptedUpstream,
) -> None:
    with pytest.raises(AdapterError) as raised:
        await run(scripted_upstream, "responses", "stream-error", input="a b", stream=True)
    assert raised.value.code == wire.ERROR_UPSTREAM
    assert raised.value.message == "upstream error: Scripted stream error."
    assert raised.value.upstream_code == "server_error"


# -- errors, as chat's -----------------------------------------------------------------------------

ERROR_CASES = [
    ("completions", {"prompt": "x"}),
    ("embeddings", {"input": "x"}),
    ("responses", {"input": "x"}),
    ("responses", {"input": "x", "stream": True}),
]


@pytest.mark.parametrize(
    ("model", "status", "retry_after", "upstream_code"),
    [
        ("status-429", 429, 2.0, "rate_limit_exceeded"),
        ("status-503", 503, 2.0, "service_unavailable"),
        ("status-400-context", 400, None, "context_length_exceeded"),
    ],
)
@pytest.mark.parametrize(("endpoint", "body"), ERROR_CASES)
async def test_an_upstream_error_keeps_its_status_retry_after_and_code(
    scripted_upstream: ScriptedUpstream,
    endpoint: wire.Endpoint,
    body: dict[str, Any],
    model: str,
    status: int,
    retry_after: float | None,
    upstream_code: str,
) -> None:
    with pytest.raises(AdapterError) as raised:
        await run(scripted_upstream, endpoint, model, **body)
    error = raised.value
    assert (error.code, error.status, error.retry_after) == (
        wire.ERROR_UPSTREAM,
        status,
        retry_after,
    )
    assert error.upstream_code == upstream_code
    assert error.message.startswith(f"upstream HTTP {status}: ")


@pytest.mark.parametrize(
    ("endpoint", "body", "before"),
    [("completions", {"prompt": "x"}, 0), ("responses", {"input": "x"}, 4)],
)
async def test_a_stalled_stream_relays_what_came_and_closing_it_frees_the_adapter(
    scripted_upstream: ScriptedUpstream,
    endpoint: wire.Endpoint,
    body: dict[str, Any],
    before: int,
) -> None:
    relay = adapter(scripted_upstream)
    try:
        stream = relay.stream({**body, "stream": True}, "hang-after-2", endpoint)
        # The events before the stall arrive as they come, not at the end of the stream.
        came = [await asyncio.wait_for(anext(stream), timeout=30) for _ in range(before + 2)]
        await stream.aclose()  # what a run.cancel does: the upstream connection is closed
        texts = [e.chunk.get("delta") or e.chunk.get("choices", [{}])[0].get("text") for e in came]
        assert texts[before:] == ["tok0 ", "tok1 "]
        again = [e async for e in relay.stream(body, "ok", endpoint)]
        assert isinstance(again[-1], Done)
    finally:
        await relay.aclose()
