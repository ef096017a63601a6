"""Requests and answers of several MiB travel whole; one run's output is bounded; no session drops.

Real processes: an Edge (its OpenAI API served by daphne, then by uvicorn), a Node agent, the
scripted upstream and the official SDK. The frame limit is 1 MiB (`wire.MAX_FRAME_BYTES`), so
everything here crosses the websocket in parts.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from nodes import wire
from tests.e2e.conftest import OpenAIStack, ScriptedUpstream
from tests.e2e.harness import Tokens, echo_config
from tests.e2e.nodes_support import sse_payloads, streamed_content

MIB = 1024 * 1024
BIG_ANSWER = 9 * MIB
BIG_STREAM = 20 * MIB
OUTPUT_LIMIT = MIB  # the bounded Edge's IOP_MAX_RUN_OUTPUT_BYTES
RUNAWAY = 64 * MIB


def build_config(upstream: ScriptedUpstream) -> Callable[[Tokens, int, int], dict[str, Any]]:
    served = ["ok", f"big-{BIG_ANSWER}", f"big-{BIG_STREAM}", f"big-{RUNAWAY}", f"big-{4 * MIB}"]

    def build(tokens: Tokens, public: int, admin: int) -> dict[str, Any]:
        return echo_config(
            tokens,
            public,
            admin,
            adapters=[
                {"id": "echo", "type": "echo"},
                {"id": "up", "type": "openai_http", "base_url": upstream.base_url},
            ],
            providers=[
                {"id": "echo-1", "adapter": "echo", "served_models": ["echo-small"], "capacity": 4},
                {"id": "up-1", "adapter": "up", "served_models": served, "capacity": 4},
            ],
            models=[
                {"id": "echo", "providers": {"echo-1": "echo-small"}},
                {"id": "ok", "providers": {"up-1": "ok"}},
                {"id": "big-answer", "providers": {"up-1": f"big-{BIG_ANSWER}"}},
                {"id": "big-stream", "providers": {"up-1": f"big-{BIG_STREAM}"}},
                {"id": "runaway", "providers": {"up-1": f"big-{RUNAWAY}"}},
                {"id": "big-4mib", "providers": {"up-1": f"big-{4 * MIB}"}},
            ],
        )

    return build


@pytest.fixture(scope="module")
def stack(
    openai_stack_factory: Callable[..., OpenAIStack],
    scripted_upstream: ScriptedUpstream,
    openai_server: str,
) -> OpenAIStack:
    build = build_config(scripted_upstream)
    stack = openai_stack_factory(build, name="large", server=openai_server)
    stack.start_node("node-a")
    return stack


@pytest.fixture(scope="module")
def bounded(
    openai_stack_factory: Callable[..., OpenAIStack], scripted_upstream: ScriptedUpstream
) -> OpenAIStack:
    """An Edge that takes at most OUTPUT_LIMIT bytes of output from one run."""
    env = {"IOP_MAX_RUN_OUTPUT_BYTES": str(OUTPUT_LIMIT)}
    stack = openai_stack_factory(build_config(scripted_upstream), env=env, name="bounded")
    stack.start_node("node-a")
    return stack


def user(content: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": content}]


def assert_one_session(stack: OpenAIStack) -> None:
    """The Node kept the one session it opened: nothing above cost it its connection."""
    node_log = stack.nodes["node-a"].log()
    assert node_log.count("connected to ws://") == 1, node_log[-3000:]
    assert "disconnected" not in stack.edge.log()
    assert stack.status()["nodes"]["node-a"]["ready"]


def test_a_request_of_several_mib_reaches_the_node_whole_and_its_answer_comes_back_whole(
    stack: OpenAIStack,
) -> None:
    text = " ".join(f"w{i}" for i in range(900_000))  # ~6 MiB, over a frame five times

    reply = stack.client().chat.completions.create(model="echo", messages=user(text))

    assert reply.choices[0].message.content == f"echo: {text}"
    assert_one_session(stack)


def test_an_image_of_several_mib_reaches_the_upstream(
    stack: OpenAIStack, scripted_upstream: ScriptedUpstream
) -> None:
    image = "data:image/png;base64," + base64.b64encode(b"\x89PNG" * (1024 * 1024)).decode()
    content = [
        {"type": "text", "text": "what is in this image?"},
        {"type": "image_url", "image_url": {"url": image}},
    ]
    scripted_upstream.clear()

    reply = stack.client().chat.completions.create(model="ok", messages=user(content))

    assert reply.choices[0].message.content == "echo: what is in this image?"
    [received] = [r for r in scripted_upstream.requests() if r["model"] == "ok"]
    url = received["body"]["messages"][0]["content"][1]["image_url"]["url"]
    # The upstream's log cuts long strings: it says how long the one it got was.
    assert url.endswith(f"...({len(image)} chars)")
    assert_one_session(stack)


def test_a_non_streamed_answer_over_the_frame_limit_arrives_whole(stack: OpenAIStack) -> None:
    reply = stack.client().chat.completions.create(model="big-answer", messages=user("big"))

    content = reply.choices[0].message.content
    assert content is not None and len(content) == BIG_ANSWER
    assert content == ("0123456789abcdef" * (BIG_ANSWER // 16))
    assert_one_session(stack)


def test_a_long_stream_arrives_whole(stack: OpenAIStack) -> None:
    stream = stack.client().chat.completions.create(
        model="big-stream", messages=user("big"), stream=True
    )

    content = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)

    assert len(content) == BIG_STREAM
    assert_one_session(stack)


def test_a_stream_past_the_output_limit_ends_with_an_error_and_is_cancelled(
    bounded: OpenAIStack,
) -> None:
    with httpx.stream(
        "POST",
        bounded.edge.completions_url,
        json={"model": "runaway", "messages": user("go"), "stream": True},
        headers={"Authorization": f"Bearer {bounded.tokens.client('app-1')}"},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        events = sse_payloads(response.iter_lines())

    assert events[-1]["error"]["code"] == wire.ERROR_OUTPUT_TOO_LARGE
    assert f"limit of {OUTPUT_LIMIT} bytes" in events[-1]["error"]["message"]
    assert len(streamed_content(events[:-1])) <= OUTPUT_LIMIT
    bounded.wait_idle("up-1")
    assert re.search(r"run \S+ failed: output_too_large", bounded.edge.log())
    assert bounded.wait_usage(status=wire.ERROR_OUTPUT_TOO_LARGE)
    assert_one_session(bounded)


def test_a_non_streamed_answer_past_the_output_limit_is_an_error(bounded: OpenAIStack) -> None:
    with pytest.raises(openai.APIStatusError) as caught:
        bounded.client().chat.completions.create(model="big-4mib", messages=user("go"))

    assert caught.value.status_code == 502
    assert caught.value.body["code"] == wire.ERROR_OUTPUT_TOO_LARGE  # type: ignore[index]
    bounded.wait_idle("up-1")
    assert_one_session(bounded)


def rss_bytes(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024  # type: ignore[union-attr]


def test_a_runaway_run_does_not_grow_the_edges_memory(bounded: OpenAIStack) -> None:
    pid = bounded.edge.process.pid
    before = rss_bytes(pid)

    # A caller that stops reading: without a bound, the Edge would buffer all 64 MiB for it.
    with httpx.stream(
        "POST",
        bounded.edge.completions_url,
        json={"model": "runaway", "messages": user("go"), "stream": True},
        headers={"Authorization": f"Bearer {bounded.tokens.client('app-1')}"},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        bounded.wait_idle("up-1")  # the run is over on the Edge: cut at the limit
        grown = rss_bytes(pid) - before

    # Without the limit it grows by about the whole run (~80 MB measured); allocator noise on a
    # busy box is a few tens of MB at most.
    assert grown < RUNAWAY // 2, f"the Edge grew by {grown} bytes"
