"""Echo runs through a real Edge (daphne) and a real Node agent over a real websocket.

One Edge and one Node for the module: `node-a` serves a fast echo (`echo`) and a slow one
(`echo-slow`, 200 ms per word) that keeps a stream going long enough to kill the Node mid-way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import pytest

from tests.e2e.harness import EdgeProcess, NodeProcess, Tokens, echo_config
from tests.e2e.nodes_support import (
    DONE,
    chat_body,
    client_headers,
    sse_payload,
    sse_payloads,
    status,
    streamed_content,
    two_ports,
    wait_idle,
    wait_node_ready,
)

NODE = "node-a"
PROVIDERS = ("echo-1", "slow-1")


@dataclass
class EchoStack:
    edge: EdgeProcess
    node: NodeProcess


@pytest.fixture(scope="module")
def echo_stack(
    tokens: Tokens,
    edge_factory: Callable[..., EdgeProcess],
    node_factory: Callable[..., NodeProcess],
) -> EchoStack:
    public, admin = two_ports()
    config = echo_config(
        tokens,
        public,
        admin,
        node_id=NODE,
        adapters=[
            {"id": "echo", "type": "echo"},
            {"id": "echo-slow", "type": "echo", "token_delay_ms": 200},
        ],
        providers=[
            {"id": "echo-1", "adapter": "echo", "served_models": ["echo-small"], "capacity": 4},
            {"id": "slow-1", "adapter": "echo-slow", "served_models": ["echo-slow"], "capacity": 2},
        ],
        models=[
            {"id": "echo", "providers": {"echo-1": "echo-small"}},
            {"id": "echo-slow", "providers": {"slow-1": "echo-slow"}},
        ],
    )
    edge = edge_factory(config, name="nodes-echo")
    return EchoStack(edge, node_factory(edge, NODE))


@pytest.fixture
def stack(echo_stack: EchoStack) -> EchoStack:
    """The module's stack with its Node running and ready (a test may have killed it)."""
    if echo_stack.node.process.poll() is not None:
        echo_stack.node.start()
    wait_node_ready(echo_stack.edge, NODE)
    return echo_stack


def test_a_non_streamed_echo_comes_back_whole_with_usage_and_decision_headers(
    stack: EchoStack, tokens: Tokens
) -> None:
    response = httpx.post(
        stack.edge.completions_url,
        json=chat_body("echo", "hello there world"),
        headers=client_headers(tokens),
        timeout=10,
    )

    assert response.status_code == 200, response.text
    assert response.headers["x-iop-provider"] == "echo-1"
    assert response.headers["x-iop-node"] == NODE
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["model"] == "echo"
    assert body["choices"][0]["message"] == {
        "role": "assistant",
        "content": "echo: hello there world",
    }
    assert body["choices"][0]["finish_reason"] == "stop"
    # 4 chunks ("echo:", " hello", " there", " world"); prompt = ceil(17 chars / 4).
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}
    wait_idle(stack.edge, *PROVIDERS)


def test_a_streamed_echo_arrives_chunk_by_chunk_then_usage_and_done(
    stack: EchoStack, tokens: Tokens
) -> None:
    body = chat_body(
        "echo", "stream me please", stream=True, stream_options={"include_usage": True}
    )
    with httpx.stream(
        "POST",
        stack.edge.completions_url,
        json=body,
        headers=client_headers(tokens),
        timeout=10,
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-iop-provider"] == "echo-1"
        assert response.headers["x-iop-node"] == NODE
        events = sse_payloads(response.iter_lines())

    assert events[-1] == DONE
    chunks = events[:-1]
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert all(chunk["model"] == "echo" for chunk in chunks)
    assert len({chunk["id"] for chunk in chunks}) == 1
    assert streamed_content(chunks) == "echo: stream me please"
    content_chunks = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert len(content_chunks) == 4
    # Deltas carry no finish_reason; the Edge's closing chunk does.
    finishing = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert not any(finishing[:-1])
    assert finishing[-1] == "stop"
    # The usage chunk comes last, with no choices: prompt = ceil(16 chars / 4).
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8}
    wait_idle(stack.edge, *PROVIDERS)


def test_a_streamed_echo_cut_by_max_tokens_closes_with_finish_reason_length(
    stack: EchoStack, tokens: Tokens
) -> None:
    with httpx.stream(
        "POST",
        stack.edge.completions_url,
        json=chat_body("echo", "one two", stream=True, max_tokens=2),
        headers=client_headers(tokens),
        timeout=10,
    ) as response:
        events = sse_payloads(response.iter_lines())

    assert events[-1] == DONE
    assert streamed_content(events[:-1]) == "echo: one"  # 2 of the 3 chunks
    finishing = [c["choices"][0]["finish_reason"] for c in events[:-1] if c["choices"]]
    assert not any(finishing[:-1])
    assert finishing[-1] == "length"
    wait_idle(stack.edge, *PROVIDERS)


def test_a_node_killed_mid_stream_fails_the_stream_frees_the_lease_and_serves_again_on_restart(
    stack: EchoStack, tokens: Tokens
) -> None:
    words = " ".join(f"word{i}" for i in range(50))  # 51 chunks at 200 ms: about 10 s
    events = []
    with httpx.stream(
        "POST",
        stack.edge.completions_url,
        json=chat_body("echo-slow", words, stream=True),
        headers=client_headers(tokens),
        timeout=10,
    ) as response:
        assert response.status_code == 200
        assert response.headers["x-iop-provider"] == "slow-1"
        lines = response.iter_lines()
        for line in lines:
            if (event := sse_payload(line)) is not None:
                events.append(event)
                break
        assert status(stack.edge)["providers"]["slow-1"]["in_flight"] == 1

        stack.node.kill()  # SIGKILL: no drain, no goodbye frame
        killed_at = time.monotonic()
        events += sse_payloads(lines)
        ended_after_s = time.monotonic() - killed_at

    assert streamed_content(events[:1]) == "echo:"
    assert DONE not in events
    assert events[-1]["error"]["code"] == "node_disconnected"
    assert events[-1]["error"]["type"] == "server_error"
    assert ended_after_s < 5, "the stream should end when the Node goes, not when it would finish"
    assert "word49" not in streamed_content(events[:-1])

    state = wait_idle(stack.edge, *PROVIDERS)
    assert not state["providers"]["slow-1"]["node_ready"]
    assert not state["nodes"].get(NODE, {}).get("ready")

    stack.node.start()
    wait_node_ready(stack.edge, NODE)
    response = httpx.post(
        stack.edge.completions_url,
        json=chat_body("echo-slow", "back again"),
        headers=client_headers(tokens),
        timeout=10,
    )
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "echo: back again"
    assert response.headers["x-iop-node"] == NODE
    wait_idle(stack.edge, *PROVIDERS)
