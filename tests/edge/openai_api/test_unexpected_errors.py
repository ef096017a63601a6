"""A bug on the OpenAI API is answered with OpenAI's envelope (500), never the server's HTML."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from edge.config import load_config_text
from edge.openai_api import app as app_module
from edge.runtime import EdgeRuntime, install_runtime
from edge.tokens import sha256_hex
from tests.edge.openai_api.asgi_client import post_chat

CONFIG = f"""
version: 1
edge: {{id: e}}
openai: {{require_auth: false, long_context_threshold_tokens: 1000}}
nodes:
  - id: node-a
    token_hash_sha256: "{sha256_hex("a")}"
    adapters: [{{id: echo, type: echo}}]
    providers: [{{id: pa, adapter: echo, served_models: [s], capacity: 1}}]
models:
  - {{id: m, providers: {{pa: s}}}}
"""


@pytest.fixture
def runtime():
    async def drop(batch: list[Any]) -> None:
        pass

    runtime = EdgeRuntime(load_config_text(CONFIG), None, drop, drop)
    install_runtime(runtime)
    yield runtime
    install_runtime(None)


async def test_an_unexpected_exception_is_a_500_envelope_and_logged(
    runtime: EdgeRuntime, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(*args: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(app_module, "serve", broken)
    with caplog.at_level(logging.ERROR, logger="edge.openai_api"):
        status, headers, body = await post_chat(b"{}")

    assert status == 500
    assert headers[b"content-type"] == b"application/json"
    error = json.loads(body)["error"]
    assert (error["type"], error["code"]) == ("server_error", "internal_error")
    assert "a bug" not in body.decode()  # the traceback is the log's, not the caller's
    assert "a bug" in caplog.text
    assert headers[b"x-request-id"]


async def test_an_exception_after_the_answer_started_is_not_answered_twice(
    runtime: EdgeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def half(*args: Any) -> None:
        send = args[-1]
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise RuntimeError("a bug mid-stream")

    monkeypatch.setattr(app_module, "serve", half)

    with pytest.raises(RuntimeError):
        await post_chat(b"{}")
