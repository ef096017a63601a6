from __future__ import annotations

import pytest

from edge.openai_api.assemble import BAD_NODE_RESPONSE, assemble_message
from edge.runs import RunFailed


def chunk(**delta) -> dict:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


def test_it_joins_the_content_of_every_delta():
    chunks = [chunk(role="assistant", content="Hel"), chunk(content="lo"), {"choices": []}]

    assert assemble_message(chunks) == {"role": "assistant", "content": "Hello"}


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

    message = assemble_message(chunks)

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
        chunk(content=["a", "list"]),
        chunk(tool_calls=["nope"]),
        chunk(tool_calls=[{"index": 0, "function": "nope"}]),
    ],
)
def test_it_refuses_a_malformed_chunk_with_a_run_failure(bad):
    with pytest.raises(RunFailed) as failure:
        assemble_message([bad])

    assert failure.value.code == BAD_NODE_RESPONSE
