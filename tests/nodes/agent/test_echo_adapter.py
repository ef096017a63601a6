from __future__ import annotations

import math
from typing import Any

import pytest

from nodes.agent.adapters import AdapterError, Delta, Done, Response
from nodes.agent.adapters.echo import EchoAdapter
from nodes.wire import AdapterSpec


async def collect(
    request: dict[str, Any], target: str = "echo-small", stream: bool = True
) -> list[Any]:
    adapter = EchoAdapter(AdapterSpec(id="echo", type="echo"))
    return [event async for event in adapter.stream({"stream": stream, **request}, target)]


def text_of(events: list[Any]) -> str:
    return "".join(
        e.chunk["choices"][0]["delta"]["content"] for e in events if isinstance(e, Delta)
    )


async def test_it_echoes_the_last_user_message_in_word_chunks() -> None:
    request = {
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "hello  brave\nnew world"},
        ]
    }
    events = await collect(request)
    deltas = [e for e in events if isinstance(e, Delta)]
    assert text_of(events) == "echo: hello  brave\nnew world"
    assert [d.chunk["choices"][0]["delta"]["content"] for d in deltas] == [
        "echo:",
        " hello",
        "  brave",
        "\nnew",
        " world",
    ]
    assert deltas[0].chunk["choices"][0]["delta"]["role"] == "assistant"
    assert isinstance(events[-1], Done)
    assert events[-1].finish_reason == "stop"


async def test_it_is_deterministic() -> None:
    request = {"messages": [{"role": "user", "content": "same input"}]}
    assert text_of(await collect(request)) == text_of(await collect(request))


async def test_it_shapes_chunks_like_openai() -> None:
    events = await collect({"messages": [{"role": "user", "content": "hi"}]}, target="echo-tiny")
    chunk = events[0].chunk
    assert chunk["object"] == "chat.completion.chunk"
    assert chunk["model"] == "echo-tiny"
    assert chunk["id"].startswith("chatcmpl-")
    assert isinstance(chunk["created"], int)
    assert chunk["choices"][0]["index"] == 0
    assert chunk["choices"][0]["finish_reason"] is None
    assert len({e.chunk["id"] for e in events if isinstance(e, Delta)}) == 1


async def test_it_counts_usage_honestly() -> None:
    messages = [
        {"role": "system", "content": "abcdefgh"},
        {"role": "user", "content": [{"type": "text", "text": "one two"}, {"type": "image_url"}]},
    ]
    events = await collect({"messages": messages})
    done = events[-1]
    chunks = len(events) - 1
    assert text_of(events) == "echo: one two"
    assert done.usage == {
        "prompt_tokens": math.ceil(len("abcdefghone two") / 4),
        "completion_tokens": chunks,
        "total_tokens": math.ceil(len("abcdefghone two") / 4) + chunks,
    }


@pytest.mark.parametrize("key", ["max_tokens", "max_completion_tokens"])
async def test_it_stops_at_max_tokens(key: str) -> None:
    events = await collect({"messages": [{"role": "user", "content": "a b c d e"}], key: 3})
    assert text_of(events) == "echo: a b"
    assert events[-1].finish_reason == "length"
    assert events[-1].usage["completion_tokens"] == 3


async def test_it_finishes_normally_when_max_tokens_is_not_reached() -> None:
    events = await collect({"messages": [{"role": "user", "content": "a"}], "max_tokens": 9})
    assert events[-1].finish_reason == "stop"


@pytest.mark.parametrize(
    "request_body",
    [{"messages": "hi"}, {"messages": [], "max_tokens": 0}, {"messages": [], "max_tokens": "5"}],
)
async def test_it_rejects_a_bad_request(request_body: dict[str, Any]) -> None:
    with pytest.raises(AdapterError) as caught:
        await collect(request_body)
    assert caught.value.code == "bad_request"


async def test_it_is_always_healthy() -> None:
    adapter = EchoAdapter(AdapterSpec(id="echo", type="echo"))
    assert await adapter.probe() == (True, "echo")
    assert adapter.probe_interval_s is None


async def test_it_answers_a_non_streaming_request_with_a_whole_completion_and_the_same_usage() -> (
    None
):
    request = {"messages": [{"role": "user", "content": "one two three"}], "max_tokens": 3}

    streamed = await collect(request)
    whole = await collect(request, stream=False, target="echo-tiny")

    assert [type(e) for e in whole] == [Response, Done]
    completion = whole[0].completion
    assert completion["object"] == "chat.completion"
    assert completion["model"] == "echo-tiny"
    assert completion["id"].startswith("chatcmpl-")
    assert completion["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "echo: one two"},
            "logprobs": None,
            "finish_reason": "length",
        }
    ]
    assert text_of(streamed) == "echo: one two"
    assert completion["usage"] == whole[-1].usage
    assert whole[-1] == streamed[-1]
