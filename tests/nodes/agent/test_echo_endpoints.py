"""Echo's completions, embeddings and Responses answers: deterministic and OpenAI-shaped."""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from typing import Any

import pytest

from nodes.agent.adapters import AdapterError, Delta, Done, Response
from nodes.agent.adapters.echo import EchoAdapter
from nodes.agent.adapters.echo_embeddings import echo_embedding
from nodes.wire import AdapterSpec


async def collect(endpoint: str, request: dict[str, Any]) -> list[Any]:
    adapter = EchoAdapter(AdapterSpec(id="echo", type="echo"))
    return [event async for event in adapter.stream(request, "echo-small", endpoint)]  # type: ignore[arg-type]


def expected_vector(text: str, dimensions: int) -> list[float]:
    """The documented derivation, written out: sha256 chained, bytes to [-1, 1], unit length,
    float32."""
    digest = hashlib.sha256(text.encode()).digest()
    stream = digest
    while len(stream) < dimensions:
        digest = hashlib.sha256(digest).digest()
        stream += digest
    values = [b / 127.5 - 1 for b in stream[:dimensions]]
    norm = math.sqrt(sum(v * v for v in values))
    packed = struct.pack(f"<{dimensions}f", *(v / norm for v in values))
    return list(struct.unpack(f"<{dimensions}f", packed))


# -- completions ---------------------------------------------------------------------------------


async def test_completions_echo_the_prompt_in_text_chunks() -> None:
    events = await collect("completions", {"prompt": "hello brave world", "stream": True})
    chunks = [e.chunk for e in events if isinstance(e, Delta)]
    assert "".join(c["choices"][0]["text"] for c in chunks) == "echo: hello brave world"
    assert {c["object"] for c in chunks} == {"text_completion"}
    assert chunks[0]["id"].startswith("cmpl-")
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks)
    done = events[-1]
    assert done == Done(
        {"prompt_tokens": math.ceil(17 / 4), "completion_tokens": 4, "total_tokens": 9}, "stop"
    )


async def test_a_whole_completion_answers_each_prompt_and_cuts_at_max_tokens() -> None:
    events = await collect("completions", {"prompt": ["one two three", [7, 8]], "max_tokens": 2})
    [response, done] = events
    assert isinstance(response, Response)
    completion = response.completion
    assert completion["object"] == "text_completion"
    assert [(c["index"], c["text"], c["finish_reason"]) for c in completion["choices"]] == [
        (0, "echo: one", "length"),
        (1, "echo: 7", "length"),
    ]
    # prompt tokens: characters / 4 for text, the length of a token array
    assert completion["usage"] == {
        "prompt_tokens": 4 + 2,
        "completion_tokens": 4,
        "total_tokens": 10,
    }
    assert done == Done(completion["usage"], "length")


@pytest.mark.parametrize("prompt", [None, [], 5, [["a"]], [1, "a"]])
async def test_completions_refuse_a_prompt_of_another_shape(prompt: Any) -> None:
    with pytest.raises(AdapterError) as raised:
        await collect("completions", {"prompt": prompt})
    assert raised.value.code == "bad_request"
    assert "prompt must be" in raised.value.message


# -- embeddings ----------------------------------------------------------------------------------


async def test_embeddings_are_the_sha256_derived_unit_vectors() -> None:
    [response, done] = await collect("embeddings", {"input": ["hello", "héllo wörld"]})
    answer = response.completion
    assert answer["object"] == "list"
    assert answer["model"] == "echo-small"
    assert [(d["object"], d["index"]) for d in answer["data"]] == [
        ("embedding", 0),
        ("embedding", 1),
    ]
    assert answer["data"][0]["embedding"] == expected_vector("hello", 8)
    assert answer["data"][1]["embedding"] == expected_vector("héllo wörld", 8)
    assert math.isclose(sum(v * v for v in answer["data"][0]["embedding"]), 1.0, rel_tol=1e-6)
    assert answer["usage"] == {"prompt_tokens": 2 + 3, "total_tokens": 5}
    assert done == Done({"prompt_tokens": 5, "completion_tokens": 0, "total_tokens": 5}, "stop")


async def test_the_same_input_gets_the_same_vector_and_another_input_another() -> None:
    first = await collect("embeddings", {"input": "same"})
    second = await collect("embeddings", {"input": "same"})
    other = await collect("embeddings", {"input": "other"})
    vector = first[0].completion["data"][0]["embedding"]
    assert second[0].completion["data"][0]["embedding"] == vector
    assert other[0].completion["data"][0]["embedding"] != vector
    assert vector == echo_embedding("same")


async def test_dimensions_and_base64_are_honoured() -> None:
    request = {"input": [[1, 2, 3]], "dimensions": 100, "encoding_format": "base64"}
    [response, done] = await collect("embeddings", request)
    encoded = response.completion["data"][0]["embedding"]
    vector = list(struct.unpack("<100f", base64.b64decode(encoded)))  # little-endian float32
    assert vector == expected_vector("1 2 3", 100)
    assert done.usage["prompt_tokens"] == 3  # a token array counts its length


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        ({"input": []}, "input must be"),
        ({"input": {"text": "x"}}, "input must be"),
        ({"input": "x", "dimensions": 0}, "dimensions must be a positive integer"),
        ({"input": "x", "dimensions": True}, "dimensions must be a positive integer"),
        ({"input": "x", "dimensions": 5000}, "dimensions must be at most 4096"),
        ({"input": "x", "encoding_format": "hex"}, "encoding_format must be 'float' or 'base64'"),
    ],
)
async def test_embeddings_refuse_what_openai_refuses(
    request_: dict[str, Any], message: str
) -> None:
    with pytest.raises(AdapterError) as raised:
        await collect("embeddings", request_)
    assert raised.value.code == "bad_request"
    assert message in raised.value.message


# -- responses -----------------------------------------------------------------------------------

STREAM_TYPES = [
    "response.created",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.delta",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]


async def test_a_streamed_response_is_openais_event_sequence() -> None:
    messages = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "input_text", "text": "hi there"}]},
    ]
    events = await collect("responses", {"input": messages, "stream": True})
    data = [e.chunk for e in events if isinstance(e, Delta)]
    assert [d["type"] for d in data] == STREAM_TYPES
    assert [d["sequence_number"] for d in data] == list(range(len(data)))
    assert "".join(d["delta"] for d in data if d["type"] == "response.output_text.delta") == (
        "echo: hi there"
    )
    created, final = data[0]["response"], data[-1]["response"]
    assert created["id"] == final["id"] and final["id"].startswith("resp_")
    assert (created["status"], final["status"]) == ("in_progress", "completed")
    assert final["output"][0]["content"][0] == {
        "type": "output_text",
        "text": "echo: hi there",
        "annotations": [],
    }
    prompt = math.ceil(len("firstokhi there") / 4)
    assert final["usage"]["input_tokens"] == prompt
    assert final["usage"]["output_tokens"] == 3
    assert events[-1] == Done(
        {"prompt_tokens": prompt, "completion_tokens": 3, "total_tokens": prompt + 3},
        "completed",
        finish_sent=True,
    )


async def test_a_whole_response_is_the_response_object_and_max_output_tokens_cuts_it() -> None:
    request = {
        "input": "one two three four",
        "max_output_tokens": 2,
        "previous_response_id": "resp_1",
    }
    [response, done] = await collect("responses", request)
    answer = response.completion
    assert answer["object"] == "response"
    assert answer["status"] == "incomplete"
    assert answer["incomplete_details"] == {"reason": "max_output_tokens"}
    assert answer["previous_response_id"] == "resp_1"
    assert answer["output"][0]["content"][0]["text"] == "echo: one"
    assert answer["usage"]["output_tokens"] == 2
    assert done.finish_reason == "incomplete"


async def test_a_cut_stream_ends_with_response_incomplete() -> None:
    events = await collect("responses", {"input": "a b c", "stream": True, "max_output_tokens": 1})
    assert events[-2].chunk["type"] == "response.incomplete"
    assert events[-1].finish_reason == "incomplete"


async def test_responses_refuse_an_input_of_another_shape() -> None:
    with pytest.raises(AdapterError) as raised:
        await collect("responses", {"input": 42})
    assert (raised.value.code, raised.value.message) == (
        "bad_request",
        "input must be a string or a list of items",
    )
