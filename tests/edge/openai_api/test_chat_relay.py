"""Through the OpenAI app: what the caller gets is what the Node relayed, only renamed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from edge.config import load_config_text
from edge.runtime import EdgeRuntime, install_runtime
from edge.tokens import sha256_hex
from tests.edge.openai_api.asgi_client import post_chat

CONFIG = f"""
version: 1
edge: {{id: e}}
openai:
  require_auth: false
nodes:
  - id: node-a
    token_hash_sha256: "{sha256_hex("a")}"
    adapters: [{{id: echo, type: echo}}]
    providers: [{{id: pa, adapter: echo, served_models: [served], capacity: 1}}]
models:
  - {{id: m, providers: {{pa: served}}}}
"""
REQUEST_ID = "req-1"
USAGE = {
    "prompt_tokens": 5,
    "completion_tokens": 2,
    "total_tokens": 7,
    "prompt_tokens_details": {"cached_tokens": 4},
    "completion_tokens_details": {"reasoning_tokens": 1},
}
Events = list[tuple[str, dict[str, Any]]]


class ScriptedNode:
    """Answers every run.request with the given events, as a Node would."""

    def __init__(self, events: Events) -> None:
        self.events = events
        self.session: Any = None

    async def send_frame(self, frame: Any) -> None:
        if frame["type"] == "run.request":
            for event, data in self.events:
                asyncio.get_running_loop().call_soon(
                    self.session.deliver, frame["run_id"], event, data
                )

    async def close_session(self, code: int) -> None:
        pass


async def noop_writer(batch: list[Any]) -> None:
    return None


@pytest.fixture
def runtime() -> Iterator[EdgeRuntime]:
    runtime = EdgeRuntime(load_config_text(CONFIG), None, noop_writer, noop_writer)
    install_runtime(runtime)
    yield runtime
    install_runtime(None)


def answer_with(runtime: EdgeRuntime, events: Events) -> None:
    node = ScriptedNode(events)
    session, _ = runtime.nodes.attach("node-a", node)
    node.session = session
    runtime.nodes.mark_ready(session, runtime.config.revision)


async def call(**body: Any) -> tuple[int, bytes]:
    raw = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}], **body})
    status, _, answer = await post_chat(raw.encode(), [(b"x-request-id", REQUEST_ID.encode())])
    return status, answer


def sse(body: bytes) -> list[Any]:
    events = [line.removeprefix(b"data: ") for line in body.split(b"\n\n") if line]
    return [e.decode() if e == b"[DONE]" else json.loads(e) for e in events]


def chunk(finish_reason: str | None = None, **delta: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-upstream",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "served",
        "system_fingerprint": "fp_up",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }


COMPLETION = {
    "id": "chatcmpl-upstream",
    "object": "chat.completion",
    "created": 1,
    "model": "served",
    "system_fingerprint": "fp_up",
    "service_tier": "default",
    "choices": [
        {
            "index": i,
            "message": {"role": "assistant", "content": "hi", "reasoning_content": "r"},
            "logprobs": {"content": [{"token": "hi", "logprob": -0.3}]},
            "finish_reason": "stop",
        }
        for i in range(2)
    ],
    "usage": USAGE,
}


async def test_a_whole_answer_goes_to_the_caller_as_the_upstream_sent_it(runtime) -> None:
    answer_with(
        runtime,
        [("response", COMPLETION), ("done", {"usage": USAGE, "finish_reason": "stop"})],
    )

    status, body = await call(n=2, logprobs=True)

    assert status == 200
    assert json.loads(body) == {**COMPLETION, "id": f"chatcmpl-{REQUEST_ID}", "model": "m"}


async def test_a_whole_answer_without_usage_gets_the_runs(runtime) -> None:
    completion = {key: value for key, value in COMPLETION.items() if key != "usage"}
    answer_with(
        runtime,
        [("response", completion), ("done", {"usage": USAGE, "finish_reason": "stop"})],
    )

    _, body = await call()

    assert json.loads(body)["usage"] == USAGE


async def test_an_answer_that_came_in_chunks_is_put_together(runtime) -> None:
    answer_with(
        runtime,
        [
            ("delta", chunk(role="assistant", content="Hel")),
            ("delta", chunk(content="lo")),
            ("done", {"usage": USAGE, "finish_reason": "length"}),
        ],
    )

    _, body = await call()

    completion = json.loads(body)
    assert completion["id"] == f"chatcmpl-{REQUEST_ID}"
    assert completion["model"] == "m"
    assert completion["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello"},
            "logprobs": None,
            "finish_reason": "length",
        }
    ]
    assert completion["usage"] == USAGE


@pytest.mark.parametrize("include_usage", [True, False])
async def test_a_stream_relays_the_upstreams_closing_chunk_and_one_usage_chunk_when_asked(
    runtime, include_usage: bool
) -> None:
    answer_with(
        runtime,
        [
            ("delta", chunk(role="assistant", content="hi")),
            ("delta", {**chunk("stop"), "usage": {"prompt_tokens": 9}}),
            ("done", {"usage": USAGE, "finish_reason": "stop", "finish_sent": True}),
        ],
    )

    status, body = await call(stream=True, stream_options={"include_usage": include_usage})

    assert status == 200
    *chunks, done = sse(body)
    assert done == "[DONE]"
    renamed = {"id": f"chatcmpl-{REQUEST_ID}", "model": "m"}
    relayed = [{**chunk(role="assistant", content="hi"), **renamed}, {**chunk("stop"), **renamed}]
    assert chunks[:2] == relayed  # the closing chunk is the upstream's, nothing added
    usage_chunks = [c for c in chunks if "usage" in c]
    if include_usage:
        assert chunks[2:] == usage_chunks
        assert [(c["choices"], c["usage"]) for c in usage_chunks] == [([], USAGE)]
    else:
        assert chunks[2:] == usage_chunks == []


async def test_a_stream_without_its_own_closing_chunk_gets_the_edges(runtime) -> None:
    answer_with(
        runtime,
        [
            ("delta", chunk(role="assistant", content="hi")),
            ("done", {"usage": USAGE, "finish_reason": "stop"}),
        ],
    )

    _, body = await call(stream=True)

    *chunks, _ = sse(body)
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, "stop"]
    assert all("usage" not in c for c in chunks)


class RelayingNode(ScriptedNode):
    """A Node that writes each chunk as the caller gets it, with the run.request's relay_as."""

    def __init__(self, chunks: list[dict[str, Any]], texts: list[str] | None = None) -> None:
        super().__init__([])
        self.chunks = chunks
        self.texts = texts
        self.requests: list[Any] = []

    async def send_frame(self, frame: Any) -> None:
        if frame["type"] == "run.request":
            self.requests.append(frame)
            relay_as = frame["relay_as"]
            texts = self.texts or [
                json.dumps({**chunk, **relay_as}, separators=(",", ":")) for chunk in self.chunks
            ]
            done = {"usage": USAGE, "finish_reason": "stop", "finish_sent": True}
            self.events = [*(("chunk", {"text": text}) for text in texts), ("done", done)]
        await super().send_frame(frame)


def relay_with(runtime: EdgeRuntime, node: RelayingNode) -> None:
    session, _ = runtime.nodes.attach("node-a", node)
    node.session = session
    runtime.nodes.mark_ready(session, runtime.config.revision)


async def test_a_stream_goes_out_as_the_node_wrote_it_for_the_caller(runtime) -> None:
    node = RelayingNode([chunk(role="assistant", content="hi"), chunk("stop")])
    relay_with(runtime, node)

    _, body = await call(stream=True, stream_options={"include_usage": True})

    [request] = node.requests
    assert request["relay_as"] == {"id": f"chatcmpl-{REQUEST_ID}", "model": "m"}
    texts = [data["text"] for _, data in node.events[:-1]]
    assert body.startswith(b"".join(b"data: %s\n\n" % text.encode() for text in texts))
    *chunks, usage_chunk, done = sse(body)
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, "stop"]
    assert (usage_chunk["usage"], done) == (USAGE, "[DONE]")


async def test_a_lone_surrogate_from_a_faulty_node_leaves_the_stream_utf8(runtime) -> None:
    relay_with(runtime, RelayingNode([], texts=['{"choices":[],"x":"\ud800"}']))

    _, body = await call(stream=True)

    assert body.decode().startswith('data: {"choices":[],"x":"?"}\n\n')
