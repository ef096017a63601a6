"""The OpenAI app reads a body only up to the limit: a declared or streamed excess is a 413."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from edge.config import load_config_text
from edge.openai_api.app import MAX_BODY_BYTES, openai_app
from edge.runtime import EdgeRuntime, install_runtime
from edge.tokens import sha256_hex
from edge.usage import Usage
from nodes.ack_log import RevisionAcks

CONFIG = f"""
version: 1
edge: {{id: e}}
openai: {{require_auth: false}}
nodes:
  - id: node-a
    token_hash_sha256: "{sha256_hex("a")}"
    adapters: [{{id: echo, type: echo}}]
    providers: [{{id: pa, adapter: echo, served_models: [s], capacity: 1}}]
models:
  - {{id: m, providers: {{pa: s}}}}
"""


async def write_no_usage(batch: list[Usage]) -> None:
    return None


async def write_no_acks(batch: list[RevisionAcks]) -> None:
    return None


@pytest.fixture(autouse=True)
def runtime() -> Iterator[EdgeRuntime]:
    runtime = EdgeRuntime(load_config_text(CONFIG), None, write_no_usage, write_no_acks)
    install_runtime(runtime)
    yield runtime
    install_runtime(None)


async def post(headers: list[tuple[bytes, bytes]], chunks: list[bytes]) -> tuple[int, Any]:
    scope = {"type": "http", "path": "/v1/chat/completions", "method": "POST", "headers": headers}
    messages = [
        {"type": "http.request", "body": chunk, "more_body": index < len(chunks) - 1}
        for index, chunk in enumerate(chunks)
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await openai_app(scope, receive, send)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], json.loads(body)


async def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_read() -> None:
    declared = [(b"content-length", str(MAX_BODY_BYTES + 1).encode())]

    status, body = await post(declared, [])  # receive() would fail: nothing may be read

    assert status == 413
    assert body["error"]["code"] == "body_too_large"
    assert body["error"]["message"] == f"The request body exceeds {MAX_BODY_BYTES} bytes."


async def test_a_body_that_grows_past_the_limit_is_refused() -> None:
    status, body = await post([], [b"x" * MAX_BODY_BYTES, b"x"])

    assert (status, body["error"]["code"]) == (413, "body_too_large")
