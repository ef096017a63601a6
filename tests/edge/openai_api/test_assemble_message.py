from __future__ import annotations

import pytest

from edge.openai_api.assemble import BAD_NODE_RESPONSE, assemble_choices
from edge.runs import RunFailed


def chunk(index: int = 0, finish_reason: str | None = None, logprobs=None, **delta) -> dict:
    choice = {"index": index, "delta": delta, "finish_reason": finish_reason}
    if logprobs is not None:
        choice["logprobs"] = logprobs
    return {"choices": [choice]}


def message_of(chunks: list[dict]) -> dict:
    [choice] = assemble_choices(chunks, "stop")
    return choice["message"]


def test_it_joins_the_content_of_every_delta():
    chunks = [chunk(role="assistant", content="Hel"), chunk(content="lo"), {"choices": []}]

    assert assemble_choices(chunks, "length") == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello"},
            "logprobs": None,
            "finish_reason": "length",
        }
    ]


def test_it_keeps_every_field_a_server_streams_beside_the_content():
    chunks = [
        chunk(role="assistant", content="", refusal=None),
        chunk(reasoning_content="Let me "),
        chunk(reasoning_content="think."),
        chunk(content="Yes", logprobs={"content": [{"token": "Yes", "logprob": -0.1}]}),
        chunk(content=".", logprobs={"content": [{"token": ".", "logprob": -0.2}]}),
        chunk(finish_reason="stop"),
    ]

    assert assemble_choices(chunks, "stop") == [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Yes.",
                "refusal": None,
                "reasoning_content": "Let me think.",
            },
            "logprobs": {
                "content": [{"token": "Yes", "logprob": -0.1}, {"token": ".", "logprob": -0.2}]
            },
            "finish_reason": "stop",
        }
    ]


def test_it_puts_each_choice_of_n_together_with_its_own_finish_reason():
    chunks = [
        chunk(0, role="assistant", content="a"),
        chunk(1, role="assistant", content="b"),
        chunk(1, content="c", finish_reason="length"),
        chunk(0, content="d"),
    ]

    choices = assemble_choices(chunks, "stop")

    assert [(c["index"], c["message"]["content"], c["finish_reason"]) for c in choices] == [
        (0, "ad", "stop"),
        (1, "bc", "length"),
    ]


def test_it_merges_streamed_tool_call_fragments_by_index():
    chunks = [
        chunk(
            role="assistant",
            tool_calls=[
                {
                    "index": 0,
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"ci'},
                }
            ],
        ),
        chunk(tool_calls=[{"index": 0, "function": {"arguments": 'ty": "Oslo"}'}}]),
        chunk(tool_calls=[{"index": 1, "id": "call_2", "function": {"name": "noop"}}]),
    ]

    message = message_of(chunks)

    assert message["content"] is None
    assert message["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
        },
        {"id": "call_2", "type": "function", "function": {"name": "noop", "arguments": ""}},
    ]


@pytest.mark.parametrize(
    "bad",
    [
        {"choices": "nope"},
        {"choices": ["nope"]},
        {"choices": [{"index": 0, "delta": "nope"}]},
        {"choices": [{"index": "0", "delta": {}}]},
        chunk(content=["a", "list"]),
        chunk(tool_calls=["nope"]),
        chunk(tool_calls=[{"index": 0, "function": "nope"}]),
    ],
)
def test_it_refuses_a_malformed_chunk_with_a_run_failure(bad):
    with pytest.raises(RunFailed) as failure:
        assemble_choices([bad], "stop")

    assert failure.value.code == BAD_NODE_RESPONSE
