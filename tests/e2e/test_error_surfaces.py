"""Every surface of a real daphne Edge answers bad input in its own shape, never an HTML 500.

`/v1` answers OpenAI's envelope, the operator API JSON with a `detail`, a websocket to a path
nothing serves a close code; the admin's pages are Django's plain ones (DEBUG is off).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from django.conf import settings
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from edge.config.yaml_source import MAX_CONFIG_BYTES
from edge.openai_api.requests import MAX_JSON_DEPTH
from iop_site.asgi import CLOSE_NOT_FOUND
from tests.e2e.conftest import OpenAIStack
from tests.e2e.harness import echo_config

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def stack(openai_stack_factory: Callable[..., OpenAIStack]) -> OpenAIStack:
    stack = openai_stack_factory(echo_config)
    stack.start_node("node-a")
    return stack


def post(stack: OpenAIStack, body: bytes) -> httpx.Response:
    headers = {
        "Content-Type": "application/json",
        "Authorization": f"Bearer {stack.tokens.client('app-1')}",
    }
    return httpx.post(stack.edge.completions_url, content=body, headers=headers, timeout=60)


def assert_envelope(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text[:300]
    assert response.headers["content-type"] == "application/json"
    assert "Traceback" not in response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code
    return error


def chat_body(content: str = "hi", model: str = "echo", **extra: Any) -> bytes:
    body = {"model": model, "messages": [{"role": "user", "content": content}], **extra}
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    "depth",
    [
        100_000,  # past what json.loads itself can parse
        970,  # parses, but not encoded again for the Node
        MAX_JSON_DEPTH + 1,
    ],
)
def test_deep_json_is_a_400_envelope(stack: OpenAIStack, depth: int) -> None:
    body = b'{"model":"echo","messages":[{"role":"user","content":"x"}],"x":'
    body += b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"

    error = assert_envelope(post(stack, body), 400, "invalid_request")

    assert "nested" in error["message"]


def test_a_lone_surrogate_in_the_model_is_a_400_and_metering_goes_on(stack: OpenAIStack) -> None:
    refused = post(stack, chat_body(model="\ud800"))
    served = post(stack, chat_body())

    assert assert_envelope(refused, 400, "invalid_request")["param"] == "model"
    assert served.status_code == 200
    # The usage batch the refusal would have shared with this request is written.
    stack.wait_usage(request_id=served.headers["x-request-id"])


@pytest.mark.parametrize("stream", [False, True])
def test_a_lone_surrogate_in_the_content_is_served(stack: OpenAIStack, stream: bool) -> None:
    response = post(stack, chat_body("\ud800", stream=stream))

    assert response.status_code == 200
    assert "\\ud800" in response.text


def test_a_body_between_4_and_8_mib_is_served(stack: OpenAIStack) -> None:
    text = "a" * (6 * MiB)

    response = post(stack, chat_body(text))

    assert response.status_code == 200, response.text[:300]
    assert response.json()["choices"][0]["message"]["content"] == f"echo: {text}"


def operator_post(stack: OpenAIStack, body: bytes) -> httpx.Response:
    headers = {"Content-Type": "application/json", **stack.edge.operator_headers()}
    return httpx.post(
        f"{stack.edge.operator_url}/refresh", content=body, headers=headers, timeout=60
    )


def assert_detail(response: httpx.Response, status: int) -> None:
    assert response.status_code == status, response.text[:300]
    assert response.headers["content-type"] == "application/json"
    assert "Traceback" not in response.text
    assert isinstance(response.json()["detail"], str)


@pytest.mark.parametrize(
    "body",
    [b"{", b"[" * 100_000 + b"]" * 100_000],
    ids=["unparsable", "deep"],
)
def test_the_operator_api_answers_a_bad_body_in_json(stack: OpenAIStack, body: bytes) -> None:
    assert_detail(operator_post(stack, body), 400)


def test_the_operator_api_answers_a_body_over_its_limit_in_json(stack: OpenAIStack) -> None:
    too_much = "a" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    body = json.dumps({"mode": "dry_run", "config_yaml": too_much}).encode()

    assert_detail(operator_post(stack, body), 413)


def test_the_operator_api_takes_a_config_larger_than_a_request_body(stack: OpenAIStack) -> None:
    # Larger than any OpenAI request may be: a refresh carries a whole fleet's config. This one
    # is read and planned (and is no config at all).
    body = json.dumps({"mode": "dry_run", "config_yaml": "a" * (MAX_CONFIG_BYTES - 1)}).encode()

    response = operator_post(stack, body)

    assert response.status_code == 422
    assert response.json()["status"] == "invalid"


def test_an_unknown_operator_path_is_a_json_404(stack: OpenAIStack) -> None:
    response = httpx.get(
        f"{stack.edge.operator_url}/nothing", headers=stack.edge.operator_headers(), timeout=10
    )

    assert_detail(response, 404)


def test_a_websocket_to_another_path_is_closed_with_4404(stack: OpenAIStack) -> None:
    async def close_code() -> int | None:
        async with connect(f"ws://127.0.0.1:{stack.edge.public_port}/ws/other/") as websocket:
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(websocket.recv(), timeout=10)
            return websocket.close_code

    assert asyncio.run(close_code()) == CLOSE_NOT_FOUND == 4404


def test_the_operator_listener_still_refuses_websockets_at_the_handshake(
    stack: OpenAIStack,
) -> None:
    async def refused() -> None:
        async with connect(f"ws://127.0.0.1:{stack.edge.admin_port}/ws/node/"):
            raise AssertionError("the operator listener accepted a websocket")

    with pytest.raises(InvalidStatus) as caught:
        asyncio.run(refused())

    assert caught.value.response.status_code == 403


def test_the_admin_listener_answers_a_plain_404_page_without_debug_details(
    stack: OpenAIStack,
) -> None:
    response = httpx.get(f"{stack.edge.base_url}/nothing", timeout=10)

    assert response.status_code == 404
    assert response.headers["content-type"].startswith("text/html")
    # DEBUG is off by default: no URL patterns, settings or traceback on the page.
    assert "Traceback" not in response.text and "URLconf" not in response.text
    assert "DEBUG" not in response.text
