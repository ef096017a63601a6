"""SIGTERM (or SIGINT) on a real Edge drains: running requests finish (or, past the drain timeout,
end with an error), new ones are refused with 503, usage is flushed, the Nodes see a clean close,
and the Edge exits 0 (its OpenAI API served by daphne, then by uvicorn)."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import OpenAIStack
from tests.e2e.harness import Tokens, echo_config, wait_until

DELAY_MS = 100
SHORT_TEXT = " ".join(f"w{i}" for i in range(20))  # ~2 s of reply
LONG_TEXT = " ".join(f"w{i}" for i in range(600))  # ~60 s of reply: outlasts a 1 s drain
CAPACITY = 2


def build_config(tokens: Tokens, public: int, admin: int) -> dict[str, Any]:
    config = echo_config(
        tokens,
        public,
        admin,
        adapters=[{"id": "slow", "type": "echo", "token_delay_ms": DELAY_MS}],
        providers=[
            {"id": "slow-1", "adapter": "slow", "served_models": ["e"], "capacity": CAPACITY}
        ],
        models=[{"id": "slow", "providers": {"slow-1": "e"}}],
    )
    config["queue"]["queue_timeout_s"] = 300  # a queued request waits out any drain here
    return config


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4) as executor:
        yield executor


def start(
    factory: Callable[..., OpenAIStack], drain_timeout_s: float, openai_server: str
) -> OpenAIStack:
    env = {"IOP_DRAIN_TIMEOUT_S": str(drain_timeout_s)}
    stack = factory(build_config, env=env, server=openai_server)
    stack.start_node("node-a")
    return stack


def post(stack: OpenAIStack, text: str, **body: Any) -> httpx.Response:
    return httpx.post(
        stack.edge.completions_url,
        headers={"Authorization": f"Bearer {stack.tokens.client('app-1')}"},
        json={"model": "slow", "messages": [{"role": "user", "content": text}], **body},
        timeout=120,
    )


def stream_events(stack: OpenAIStack, text: str, started: threading.Event) -> list[Any]:
    """Every `data:` payload of a streamed request (`[DONE]` as the string); ``started`` is set
    once the first chunk has arrived."""
    events: list[Any] = []
    with httpx.stream(
        "POST",
        stack.edge.completions_url,
        headers={"Authorization": f"Bearer {stack.tokens.client('app-1')}"},
        json={"model": "slow", "stream": True, "messages": [{"role": "user", "content": text}]},
        timeout=120,
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                data = line.removeprefix("data: ")
                events.append(data if data == "[DONE]" else json.loads(data))
                started.set()
    return events


def content(events: list[Any]) -> str:
    return "".join(
        e["choices"][0]["delta"].get("content") or ""
        for e in events
        if isinstance(e, dict) and e.get("choices")
    )


def signal_and_wait_for_the_drain(stack: OpenAIStack, signum: signal.Signals) -> None:
    stack.edge.process.send_signal(signum)
    wait_until(lambda: "drain:" in stack.edge.log(), timeout=20, what="the drain to start")


def test_sigterm_lets_running_streams_finish_refuses_new_requests_and_exits_0(
    openai_stack_factory: Callable[..., OpenAIStack], pool: ThreadPoolExecutor, openai_server: str
) -> None:
    stack = start(openai_stack_factory, drain_timeout_s=120, openai_server=openai_server)
    started = threading.Event()
    stream: Future[list[Any]] = pool.submit(stream_events, stack, SHORT_TEXT, started)
    assert started.wait(30)
    revision = stack.status()["revision"]

    signal_and_wait_for_the_drain(stack, signal.SIGTERM)
    refused = post(stack, "hello")
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "edge_draining"
    assert refused.headers["retry-after"] == "5"

    events = stream.result(timeout=60)
    assert events[-1] == "[DONE]"
    assert content(events) == f"echo: {SHORT_TEXT}"
    assert events[-2]["choices"][0]["finish_reason"] == "stop"
    assert stack.edge.process.wait(timeout=30) == 0
    # The usage of the finished stream was flushed before the exit.
    statuses = [row["status"] for row in stack.usage_rows()]
    assert statuses.count("ok") == 1
    # So was the Node's config ack, to its mirror row.
    with closing(stack.edge.db()) as db:
        acked = db.execute("SELECT last_acked_revision FROM nodes_node WHERE node_id = 'node-a'")
        assert acked.fetchall() == [(revision,)]
    # The Node saw the Edge close its session as going away, and tries to reconnect.
    node = stack.nodes["node-a"]
    wait_until(lambda: "close 1000" in node.log(), timeout=20, what="the Node to see close 1000")
    assert node.process.poll() is None


def test_sigint_ends_runs_past_the_drain_timeout_with_an_error_and_the_edge_exits_0(
    openai_stack_factory: Callable[..., OpenAIStack], pool: ThreadPoolExecutor, openai_server: str
) -> None:
    stack = start(openai_stack_factory, drain_timeout_s=1, openai_server=openai_server)
    started = threading.Event()
    stream: Future[list[Any]] = pool.submit(stream_events, stack, LONG_TEXT, started)
    assert started.wait(30)
    unanswered = pool.submit(post, stack, LONG_TEXT)
    wait_until(lambda: stack.in_flight("slow-1") == CAPACITY, what="both slots busy")
    queued = pool.submit(post, stack, LONG_TEXT)
    wait_until(lambda: stack.status()["models"]["slow"]["queue_depth"] == 1, what="one queued")

    signal_and_wait_for_the_drain(stack, signal.SIGINT)

    events = stream.result(timeout=60)
    assert content(events).startswith("echo: w0")
    assert events[-1]["error"]["code"] == "edge_shutting_down"
    for refused in (unanswered.result(timeout=60), queued.result(timeout=60)):
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "edge_shutting_down"
    assert stack.edge.process.wait(timeout=30) == 0
    statuses = [row["status"] for row in stack.usage_rows()]
    assert statuses.count("edge_shutting_down") == 3
