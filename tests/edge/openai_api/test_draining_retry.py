"""Through the OpenAI app: a run that failed before answering is answered by the provider that
served; when none is left, the caller gets the upstream's meaning (status, code, Retry-After);
the decision headers and the usage row say how many providers were tried and what was answered.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from edge.config import load_config_text
from edge.runtime import EdgeRuntime, install_runtime
from edge.tokens import sha256_hex
from edge.usage import Usage
from nodes.ack_log import RevisionAcks
from tests.edge.openai_api.asgi_client import post_chat

CONFIG = f"""
version: 1
edge: {{id: e}}
openai:
  require_auth: false
  long_context_threshold_tokens: 1000
nodes:
  - id: node-a
    token_hash_sha256: "{sha256_hex("a")}"
    adapters: [{{id: echo, type: echo}}]
    providers: [{{id: pa, adapter: echo, served_models: [s], capacity: 1, priority: 1}}]
  - id: node-b
    token_hash_sha256: "{sha256_hex("b")}"
    adapters: [{{id: echo, type: echo}}]
    providers:
      - {{id: pb, adapter: echo, served_models: [s], capacity: 1, priority: 2}}
      - {{id: short, adapter: echo, served_models: [s], capacity: 1, long_context_slots: 0}}
models:
  - {{id: m, providers: {{pa: s, pb: s}}}}
  - {{id: only-a, providers: {{pa: s}}}}
  - {{id: short-only, providers: {{short: s}}}}
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
ANSWER = [("delta", DELTA), ("done", DONE)]


def failing(status: int | None, code: str = "upstream_error", **extra: Any) -> ScriptedNode:
    message = f"upstream HTTP {status}: nope"
    return ScriptedNode([("error", {"code": code, "message": message, "status": status, **extra})])


class Recorded:
    rows: list[Usage]

    def __init__(self) -> None:
        self.rows = []

    async def __call__(self, batch: list[Usage]) -> None:
        self.rows.extend(batch)


async def write_no_acks(batch: list[RevisionAcks]) -> None:
    return None


@pytest.fixture
def recorded() -> Recorded:
    return Recorded()


@pytest.fixture
def runtime(recorded):
    runtime = EdgeRuntime(load_config_text(CONFIG), None, recorded, write_no_acks)
    install_runtime(runtime)
    yield runtime
    install_runtime(None)


def connect(runtime: EdgeRuntime, node_id: str, node: ScriptedNode) -> None:
    session, _ = runtime.nodes.attach(node_id, node)
    node.session = session
    runtime.nodes.mark_ready(session, runtime.config.revision)


async def call(
    stream: bool = False, model: str = "m", text: str = "x"
) -> tuple[int, dict[bytes, bytes], bytes]:
    body = json.dumps(
        {"model": model, "stream": stream, "messages": [{"role": "user", "content": text}]}
    ).encode()
    return await post_chat(body)


async def usage_row(runtime: EdgeRuntime, recorded: Recorded) -> Usage:
    await runtime.usage.flush()
    (row,) = recorded.rows
    return row


@pytest.mark.parametrize("stream", [False, True])
async def test_a_run_a_draining_node_refused_goes_to_another_provider(runtime, stream):
    draining = ScriptedNode([("error", {"code": "node_draining", "message": "node is draining"})])
    healthy = ScriptedNode(ANSWER)
    connect(runtime, "node-a", draining)
    connect(runtime, "node-b", healthy)

    status, headers, body = await call(stream)

    assert status == 200
    assert headers[b"x-iop-node"] == b"node-b"
    assert list(headers).count(b"x-iop-provider") == 1
    assert b"hi" in body
    assert (draining.requests, healthy.requests) == (1, 1)


@pytest.mark.parametrize("stream", [False, True])
async def test_the_answer_says_how_many_providers_were_tried(runtime, recorded, stream):
    connect(runtime, "node-a", failing(503, retry_after=2.0))
    connect(runtime, "node-b", ScriptedNode(ANSWER))

    status, headers, _ = await call(stream)

    assert status == 200
    assert (headers[b"x-iop-attempts"], headers[b"x-iop-providers-tried"]) == (b"2", b"pa,pb")
    row = await usage_row(runtime, recorded)
    assert (row.status, row.provider, row.attempts, row.providers_tried) == ("ok", "pb", 2, "pa,pb")


async def test_a_rate_limited_upstream_with_no_other_provider_is_a_429_with_its_hint(
    runtime, recorded
):
    connect(runtime, "node-a", failing(429, retry_after=1.5))

    status, headers, body = await call(model="only-a")

    assert status == 429
    assert (headers[b"retry-after"], headers[b"retry-after-ms"]) == (b"2", b"1500")
    error = json.loads(body)["error"]
    assert (error["code"], error["type"]) == ("rate_limit_exceeded", "rate_limit_error")
    assert (headers[b"x-iop-attempts"], headers[b"x-iop-providers-tried"]) == (b"1", b"pa")
    row = await usage_row(runtime, recorded)
    assert (row.status, row.attempts, row.providers_tried) == ("rate_limit_exceeded", 1, "pa")


async def test_a_context_length_rejection_keeps_the_upstreams_code_and_message(runtime, recorded):
    connect(runtime, "node-a", failing(400, upstream_code="context_length_exceeded"))
    connect(runtime, "node-b", ScriptedNode(ANSWER))

    status, _, body = await call()

    assert status == 400
    error = json.loads(body)["error"]
    assert (error["code"], error["message"]) == (
        "context_length_exceeded",
        "nope",  # the upstream's own message, without the Node's prefix
    )
    assert (await usage_row(runtime, recorded)).status == "context_length_exceeded"


async def test_an_upstream_rejection_is_metered_as_the_caller_saw_it(runtime, recorded):
    connect(runtime, "node-a", failing(422))

    status, _, body = await call(model="only-a")

    assert (status, json.loads(body)["error"]["code"]) == (400, "upstream_rejected")
    assert (await usage_row(runtime, recorded)).status == "upstream_rejected"


async def test_rejected_credentials_everywhere_are_a_502_upstream_auth_failed(runtime, recorded):
    connect(runtime, "node-a", failing(401))

    first = await call(model="only-a")
    again = await call(model="only-a")  # the provider is out now: same meaning

    for status, headers, body in (first, again):
        assert status == 502 and b"retry-after" not in headers
        assert json.loads(body)["error"]["code"] == "upstream_auth_failed"
    await runtime.usage.flush()
    assert [row.status for row in recorded.rows] == ["upstream_auth_failed"] * 2


async def test_a_long_prompt_no_provider_ever_takes_is_a_400(runtime, recorded):
    connect(runtime, "node-b", ScriptedNode(ANSWER))

    status, headers, body = await call(model="short-only", text="w" * 8000)

    assert status == 400 and b"retry-after" not in headers
    error = json.loads(body)["error"]
    assert (error["code"], error["param"]) == ("context_length_exceeded", "messages")
    assert (await usage_row(runtime, recorded)).status == "context_length_exceeded"


async def test_a_server_error_everywhere_is_a_502_with_the_last_hint(runtime):
    connect(runtime, "node-a", failing(500))
    connect(runtime, "node-b", failing(503, retry_after=4.0))

    status, headers, body = await call()

    assert status == 502
    assert (headers[b"retry-after"], headers[b"x-iop-providers-tried"]) == (b"4", b"pa,pb")
    assert json.loads(body)["error"]["code"] == "upstream_error"


async def test_a_stream_cut_after_its_first_token_ends_with_the_error_it_is_metered_as(
    runtime, recorded
):
    rejected = {"code": "upstream_error", "message": "upstream HTTP 400: bad", "status": 400}
    connect(runtime, "node-a", ScriptedNode([("delta", DELTA), ("error", rejected)]))

    status, _, body = await call(stream=True, model="only-a")

    assert status == 200  # the stream had started: the error is its last event
    last = json.loads(body.decode().strip().split("data: ")[-1])
    assert last["error"]["code"] == "upstream_rejected"
    assert (await usage_row(runtime, recorded)).status == "upstream_rejected"
