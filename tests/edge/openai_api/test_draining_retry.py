"""Through the OpenAI app: a run a draining Node refused is answered by the provider that served."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from edge.config import load_config_text
from edge.openai_api import app as app_module
from edge.runtime import EdgeRuntime, install_runtime
from edge.tokens import sha256_hex

CONFIG = f"""
version: 1
edge: {{id: e}}
openai:
  require_auth: false
nodes:
  - id: node-a
    token_hash_sha256: "{sha256_hex("a")}"
    adapters: [{{id: echo, type: echo}}]
    providers: [{{id: pa, adapter: echo, served_models: [s], capacity: 1, priority: 1}}]
  - id: node-b
    token_hash_sha256: "{sha256_hex("b")}"
    adapters: [{{id: echo, type: echo}}]
    providers: [{{id: pb, adapter: echo, served_models: [s], capacity: 1, priority: 2}}]
models:
  - {{id: m, providers: {{pa: s, pb: s}}}}
"""


class ScriptedNode:
    """Answers every run.request with the given events, as a Node would."""

    def __init__(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        self.events = events
        self.session: Any = None
        self.requests = 0

    async def send_frame(self, frame: Any) -> None:
        if frame["type"] == "run.request":
            self.requests += 1
            for event, data in self.events:
                asyncio.get_running_loop().call_soon(
                    self.session.deliver, frame["run_id"], event, data
                )

    async def close_session(self, code: int) -> None:
        pass


DONE = {
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    "finish_reason": "stop",
}
DELTA = {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]}


async def noop_writer(batch: list[Any]) -> None:
    return None


@pytest.fixture
def runtime():
    runtime = EdgeRuntime(load_config_text(CONFIG), None, noop_writer)
    install_runtime(runtime)
    yield runtime
    install_runtime(None)


def connect(runtime: EdgeRuntime, node_id: str, node: ScriptedNode) -> None:
    session, _ = runtime.nodes.attach(node_id, node)
    node.session = session
    runtime.nodes.mark_ready(session, runtime.config.revision)


async def call(stream: bool = False) -> tuple[int, dict[bytes, bytes], bytes]:
    body = json.dumps(
        {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "x"}]}
    ).encode()
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await asyncio.Event().wait()  # the caller stays connected
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "path": "/v1/chat/completions", "method": "POST", "headers": []}
    await app_module.openai_app(scope, receive, send)
    start = sent[0]
    return start["status"], dict(start["headers"]), b"".join(m.get("body", b"") for m in sent[1:])


@pytest.mark.parametrize("stream", [False, True])
async def test_a_run_a_draining_node_refused_goes_to_another_provider(runtime, stream):
    draining = ScriptedNode([("error", {"code": "node_draining", "message": "node is draining"})])
    healthy = ScriptedNode([("delta", DELTA), ("done", DONE)])
    connect(runtime, "node-a", draining)
    connect(runtime, "node-b", healthy)

    status, headers, body = await call(stream)

    assert status == 200
    assert headers[b"x-iop-node"] == b"node-b"
    assert list(headers).count(b"x-iop-provider") == 1
    assert b"hi" in body
    assert (draining.requests, healthy.requests) == (1, 1)


async def test_an_upstream_error_is_not_retried(runtime):
    failing = ScriptedNode(
        [("error", {"code": "upstream_error", "message": "boom", "status": 500})]
    )
    healthy = ScriptedNode([("delta", DELTA), ("done", DONE)])
    connect(runtime, "node-a", failing)
    connect(runtime, "node-b", healthy)

    status, _, _ = await call()

    assert status == 502
    assert (failing.requests, healthy.requests) == (1, 0)
