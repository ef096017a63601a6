"""The official `openai` SDK against a real Edge and real Nodes: the API, its errors, its headers.

One Edge for the module, its OpenAI API served by daphne, then by uvicorn (`openai.server`).
Node `node-a` serves the echo models, the queue-limited providers and an `openai_http` provider
pointed at a mock upstream that fails every chat request; `node-b` is never started (its model
has no provider); `node-k` is started and killed by the Node-failure test.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.harness import Tokens, echo_config, sha256_hex, wait_until

MAX_BODY_BYTES = 64 * 1024
SLOW_DELAY_MS = 150
SLOW_TEXT = " ".join(["w"] * 80)  # 159 chars: normal; ~12 s of reply unless closed earlier


class _FailingUpstream(BaseHTTPRequestHandler):
    """An OpenAI-compatible server that is healthy (`GET /models`) but fails every completion."""

    def do_GET(self) -> None:
        self._reply(200, {"object": "list", "data": [{"id": "mock-model", "object": "model"}]})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self._reply(500, {"error": {"message": "mock upstream exploded", "type": "server_error"}})

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def failing_upstream() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FailingUpstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def _config(upstream_url: str):
    def build(tokens: Tokens, public: int, admin: int) -> dict[str, Any]:
        echo = {"served_models": ["echo-small"]}
        return echo_config(
            tokens,
            public,
            admin,
            adapters=[
                {"id": "echo", "type": "echo"},
                {"id": "slow", "type": "echo", "token_delay_ms": SLOW_DELAY_MS},
                {"id": "upstream", "type": "openai_http", "base_url": upstream_url},
            ],
            providers=[
                {"id": "echo-1", "adapter": "echo", "capacity": 4, **echo},
                {"id": "q-full", "adapter": "slow", "capacity": 1, "max_queue": 0, **echo},
                {
                    "id": "q-wait",
                    "adapter": "slow",
                    "capacity": 1,
                    "max_queue": 5,
                    "queue_timeout_s": 0.3,
                    **echo,
                },
                {
                    "id": "q-long",
                    "adapter": "slow",
                    "capacity": 1,
                    "max_queue": 5,
                    "queue_timeout_s": 20,
                    **echo,
                },
                {
                    "id": "up-1",
                    "adapter": "upstream",
                    "served_models": ["mock-model"],
                    "capacity": 2,
                },
            ],
            extra_nodes=[
                {
                    "id": "node-b",
                    "token_hash_sha256": sha256_hex(tokens.node("node-b")),
                    "adapters": [{"id": "echo", "type": "echo"}],
                    "providers": [{"id": "off-1", "adapter": "echo", "capacity": 1, **echo}],
                },
                {
                    "id": "node-k",
                    "token_hash_sha256": sha256_hex(tokens.node("node-k")),
                    "adapters": [{"id": "slow", "type": "echo", "token_delay_ms": SLOW_DELAY_MS}],
                    "providers": [{"id": "doomed", "adapter": "slow", "capacity": 2, **echo}],
                },
            ],
            models=[
                {"id": "echo", "providers": {"echo-1": "echo-small"}},
                {
                    "id": "echo-capped",
                    "providers": {"echo-1": "echo-small"},
                    "generation": {"default_max_tokens": 3, "max_tokens_limit": 50},
                },
                {"id": "echo-q-full", "providers": {"q-full": "echo-small"}},
                {"id": "echo-q-wait", "providers": {"q-wait": "echo-small"}},
                {"id": "echo-q-long", "providers": {"q-long": "echo-small"}},
                {"id": "upstream", "providers": {"up-1": "mock-model"}},
                {"id": "offline", "providers": {"off-1": "echo-small"}},
                {"id": "doomed", "providers": {"doomed": "echo-small"}},
            ],
        )

    return build


MODEL_IDS = {
    "echo",
    "echo-capped",
    "echo-q-full",
    "echo-q-wait",
    "echo-q-long",
    "upstream",
    "offline",
    "doomed",
}


@pytest.fixture(scope="module")
def stack(openai_stack_factory, failing_upstream, openai_server):
    stack = openai_stack_factory(
        _config(failing_upstream),
        env={"IOP_MAX_BODY_BYTES": str(MAX_BODY_BYTES)},
        server=openai_server,
    )
    stack.start_node("node-a")
    return stack


@pytest.fixture(scope="module")
def client(stack) -> openai.OpenAI:
    return stack.client("app-1")


@pytest.fixture(scope="module")
def http(stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"{stack.edge.openai_url}/v1", timeout=30) as http:
        yield http


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def auth(stack, token_ref: str = "app-1") -> dict[str, str]:
    return {"Authorization": f"Bearer {stack.tokens.client(token_ref)}"}


def error_of(exc: openai.APIStatusError) -> dict[str, Any]:
    """The `error` object of an SDK error (the SDK unwraps the envelope into ``body``)."""
    body = exc.body
    assert isinstance(body, dict), body
    return body.get("error", body)


def new_request_id() -> str:
    return f"req-{uuid.uuid4().hex[:16]}"


@contextmanager
def held_slot(client: openai.OpenAI, model: str) -> Iterator[httpx.Headers]:
    """A slow stream holding one slot of ``model``'s provider until the block ends.

    The SDK returns once the response headers arrive, which the Edge sends only after the
    lease is taken (with the first token): the slot is held from then on. Closing the stream is
    a client disconnect.
    """
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=user(SLOW_TEXT), stream=True
    )
    stream = raw.parse()
    try:
        yield raw.headers
    finally:
        stream.close()


# -- success paths ---------------------------------------------------------------------------


def test_models_list_names_every_configured_model(client):
    models = client.models.list()
    assert {m.id for m in models.data} == MODEL_IDS
    assert {m.object for m in models.data} == {"model"}
    assert {m.owned_by for m in models.data} == {"edge-test"}


def test_non_streaming_completion(client):
    completion = client.chat.completions.create(model="echo", messages=user("hello edge"))
    assert completion.object == "chat.completion"
    assert completion.model == "echo"
    assert completion.id.startswith("chatcmpl-")
    [choice] = completion.choices
    assert choice.message.role == "assistant"
    assert choice.message.content == "echo: hello edge"
    assert choice.finish_reason == "stop"
    # Echo usage: prompt = ceil(chars / 4); completion = one token per word of the reply.
    assert completion.usage.prompt_tokens == 3
    assert completion.usage.completion_tokens == 3
    assert completion.usage.total_tokens == 6


def test_streaming_completion_with_usage_chunk(client):
    chunks = list(
        client.chat.completions.create(
            model="echo",
            messages=user("stream me please"),
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert len({c.id for c in chunks}) == 1
    assert {c.model for c in chunks} == {"echo"}
    *content_chunks, usage_chunk = chunks
    text = "".join(c.choices[0].delta.content or "" for c in content_chunks)
    assert text == "echo: stream me please"
    assert content_chunks[0].choices[0].delta.role == "assistant"
    # OpenAI's stream shape: the last choice chunk carries the finish_reason.
    assert [c.choices[0].finish_reason for c in content_chunks][-1] == "stop"
    assert all(c.usage is None for c in content_chunks)
    assert usage_chunk.choices == []
    assert usage_chunk.usage.prompt_tokens == 4
    assert usage_chunk.usage.completion_tokens == 4
    assert usage_chunk.usage.total_tokens == 8


def test_streaming_without_include_usage_has_no_usage_chunk(client):
    chunks = list(
        client.chat.completions.create(model="echo", messages=user("no usage"), stream=True)
    )
    assert all(c.usage is None for c in chunks)
    assert all(c.choices for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "echo: no usage"


def test_raw_stream_is_server_sent_events_ending_in_done(stack, http):
    body = {"model": "echo", "messages": user("raw sse"), "stream": True}
    with http.stream("POST", "/chat/completions", json=body, headers=auth(stack)) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in events)
    assert events[-1] == "data: [DONE]"
    for line in events[:-1]:
        assert json.loads(line.removeprefix("data: "))["object"] == "chat.completion.chunk"


def test_a_request_id_that_is_not_plainly_an_id_is_replaced(client):
    raw = client.chat.completions.with_raw_response.create(
        model="echo", messages=user("ids"), extra_headers={"x-request-id": "not an id; x=1"}
    )

    assert raw.headers["x-request-id"] != "not an id; x=1"
    assert len(raw.headers["x-request-id"]) == 24


def test_decision_headers_on_non_stream_and_stream(client):
    request_id = new_request_id()
    raw = client.chat.completions.with_raw_response.create(
        model="echo", messages=user("headers"), extra_headers={"x-request-id": request_id}
    )
    assert raw.headers["x-request-id"] == request_id
    assert raw.headers["x-iop-provider"] == "echo-1"
    assert raw.headers["x-iop-node"] == "node-a"
    assert raw.headers["x-iop-context-class"] == "normal"
    assert float(raw.headers["x-iop-queue-ms"]) >= 0
    assert raw.parse().choices[0].message.content == "echo: headers"

    raw = client.chat.completions.with_raw_response.create(
        model="echo", messages=user("stream headers"), stream=True
    )
    assert raw.headers["x-iop-provider"] == "echo-1"
    assert raw.headers["x-iop-node"] == "node-a"
    assert raw.headers["x-iop-context-class"] == "normal"
    assert float(raw.headers["x-iop-queue-ms"]) >= 0
    assert len(raw.headers["x-request-id"]) > 0
    stream = raw.parse()
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == (
        "echo: stream headers"
    )


def test_request_id_is_generated_when_absent(client):
    first = client.models.with_raw_response.list().headers["x-request-id"]
    second = client.models.with_raw_response.list().headers["x-request-id"]
    assert first and second and first != second


# -- generation policy -------------------------------------------------------------------------


def test_default_max_tokens_fills_in_a_missing_max_tokens(client):
    completion = client.chat.completions.create(
        model="echo-capped", messages=user("one two three four five")
    )
    assert completion.choices[0].message.content == "echo: one two"
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 3


def test_explicit_max_tokens_within_limit_is_used(client):
    completion = client.chat.completions.create(
        model="echo-capped", messages=user("one two three four five"), max_tokens=50
    )
    assert completion.choices[0].message.content == "echo: one two three four five"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.completion_tokens == 6

    completion = client.chat.completions.create(
        model="echo", messages=user("one two three four five"), max_tokens=2
    )
    assert completion.choices[0].message.content == "echo: one"
    assert completion.choices[0].finish_reason == "length"


@pytest.mark.parametrize("key", ["max_tokens", "max_completion_tokens"])
def test_max_tokens_over_the_model_limit_is_refused(stack, client, key):
    request_id = new_request_id()
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="echo-capped",
            messages=user("too much"),
            extra_headers={"x-request-id": request_id},
            **{key: 51},
        )
    error = error_of(caught.value)
    assert caught.value.status_code == 400
    assert error["param"] == key
    assert error["code"] == "max_tokens_exceeded"
    assert error["type"] == "invalid_request_error"
    assert "50" in error["message"]
    # Refused after the model lookup: metered, with nothing run.
    [row] = stack.wait_usage(request_id=request_id)
    assert (row["status"], row["model"], row["provider"]) == (
        "max_tokens_exceeded",
        "echo-capped",
        "",
    )


# -- 400 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{not json", None),
        (b'["a", "list"]', None),
        (b"\xff\xfe", None),
        (json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode(), "model"),
        (json.dumps({"model": "echo"}).encode(), "messages"),
        (json.dumps({"model": "echo", "messages": []}).encode(), "messages"),
        (json.dumps({"model": "echo", "messages": [{"role": "wizard", "content": "x"}]}).encode(),
         "messages[0].role"),
        (json.dumps({"model": "echo", "messages": user("x"), "stream": "yes"}).encode(), "stream"),
    ],
    ids=["invalid-json", "not-object", "not-utf8", "no-model", "no-messages",
         "empty-messages", "bad-role", "bad-stream"],
)  # fmt: skip
def test_bad_request_bodies_get_400_naming_the_field(stack, http, body, param):
    response = http.post(
        "/chat/completions",
        content=body,
        headers={**auth(stack), "content-type": "application/json"},
    )
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-request-id"]
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert error["message"]


@pytest.mark.parametrize(
    ("extra", "param"),
    [({"max_tokens": 0}, "max_tokens"), ({"max_tokens": -5}, "max_tokens"), ({"n": 0}, "n")],
)
def test_bad_fields_through_the_sdk_get_400(client, extra, param):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="echo", messages=user("x"), **extra)
    assert caught.value.status_code == 400
    assert error_of(caught.value)["param"] == param


def test_empty_messages_through_the_sdk_get_400(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="echo", messages=[])
    assert error_of(caught.value)["param"] == "messages"


# -- 401 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Basic dXNlcjpwYXNz"}, {"Authorization": "Bearer"}],
    ids=["no-header", "basic-scheme", "empty-bearer"],
)
def test_missing_token_gets_401(http, headers):
    for response in (
        http.post(
            "/chat/completions", json={"model": "echo", "messages": user("x")}, headers=headers
        ),
        http.get("/models", headers=headers),
    ):
        assert response.status_code == 401
        error = response.json()["error"]
        assert error["type"] == "authentication_error"
        assert error["code"] == "invalid_api_key"


def test_unknown_token_gets_authentication_error(stack):
    stranger = stack.client(api_key="client-not-a-configured-token")
    with pytest.raises(openai.AuthenticationError) as caught:
        stranger.chat.completions.create(model="echo", messages=user("x"))
    assert caught.value.status_code == 401
    assert error_of(caught.value)["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        stranger.models.list()


def test_second_principal_token_is_accepted(stack):
    completion = stack.client("app-2").chat.completions.create(model="echo", messages=user("two"))
    assert completion.choices[0].message.content == "echo: two"


# -- 404 / 413 ---------------------------------------------------------------------------------


def test_unknown_model_gets_not_found(client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="no-such-model", messages=user("x"))
    error = error_of(caught.value)
    assert caught.value.status_code == 404
    assert error["code"] == "model_not_found"
    assert error["param"] == "model"
    assert "no-such-model" in error["message"]
    assert caught.value.response.headers["x-request-id"]


def test_unknown_endpoint_gets_404(stack, http):
    response = http.post("/audio/speech", json={"model": "echo", "input": "x"}, headers=auth(stack))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_oversized_body_gets_413(client):
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="echo", messages=user("x" * (MAX_BODY_BYTES + 1)))
    assert caught.value.status_code == 413
    error = error_of(caught.value)
    assert error["code"] == "body_too_large"
    assert error["type"] == "invalid_request_error"


# -- 429 ---------------------------------------------------------------------------------------


def test_queue_full_gets_429_with_retry_after(stack, client):
    request_id = new_request_id()
    with held_slot(client, "echo-q-full") as held:
        assert held["x-iop-provider"] == "q-full"
        assert stack.in_flight("q-full") == 1
        with pytest.raises(openai.RateLimitError) as caught:
            client.chat.completions.create(
                model="echo-q-full", messages=user("x"), extra_headers={"x-request-id": request_id}
            )
    assert caught.value.status_code == 429
    assert error_of(caught.value)["code"] == "queue_full"
    assert error_of(caught.value)["type"] == "rate_limit_error"
    assert int(caught.value.response.headers["retry-after"]) >= 1
    stack.wait_idle("q-full")  # the closed stream released its slot

    [row] = stack.wait_usage(request_id=request_id)
    assert (row["status"], row["model"], row["token_ref"]) == ("queue_full", "echo-q-full", "app-1")
    # The held stream was cut by its client: metered as cancelled on the provider it ran on.
    held_id = held["x-request-id"]
    [held_row] = stack.wait_usage(request_id=held_id)
    assert (held_row["status"], held_row["provider"]) == ("cancelled", "q-full")


def test_queue_timeout_gets_429_with_retry_after(stack, client):
    request_id = new_request_id()
    with held_slot(client, "echo-q-wait") as held:
        assert held["x-iop-provider"] == "q-wait"
        started = time.monotonic()
        with pytest.raises(openai.RateLimitError) as caught:
            client.chat.completions.create(
                model="echo-q-wait", messages=user("x"), extra_headers={"x-request-id": request_id}
            )
        waited = time.monotonic() - started
    assert waited >= 0.25, waited  # it waited out queue_timeout_s (0.3), not refused at once
    assert caught.value.status_code == 429
    assert error_of(caught.value)["code"] == "queue_timeout"
    assert int(caught.value.response.headers["retry-after"]) >= 1
    stack.wait_idle("q-wait")
    [row] = stack.wait_usage(request_id=request_id)
    assert (row["status"], row["model"]) == ("queue_timeout", "echo-q-wait")


def test_queued_request_is_admitted_when_the_slot_frees(stack, client):
    """Within the queue timeout, a waiter gets the slot freed by a cancelled stream."""
    with ThreadPoolExecutor(1) as pool:
        with held_slot(client, "echo-q-long"):
            waiter = pool.submit(
                client.chat.completions.with_raw_response.create,
                model="echo-q-long",
                messages=user("next"),
            )
            wait_until(
                lambda: stack.status()["models"]["echo-q-long"]["queue_depth"] == 1,
                timeout=15,
                what="a waiter in the echo-q-long queue",
            )
        raw = waiter.result(timeout=15)
    assert raw.headers["x-iop-provider"] == "q-long"
    assert float(raw.headers["x-iop-queue-ms"]) > 0
    assert raw.parse().choices[0].message.content == "echo: next"
    stack.wait_idle("q-long")


# -- 502 / 503 ---------------------------------------------------------------------------------


def test_upstream_failure_gets_502(client):
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="upstream", messages=user("x"))
    assert caught.value.status_code == 502
    error = error_of(caught.value)
    assert error["code"] == "upstream_error"
    assert error["type"] == "server_error"
    assert "500" in error["message"]
    assert "mock upstream exploded" in error["message"]


def test_a_stream_failing_before_its_first_token_gets_a_real_502(stack, client, http):
    """Stream headers wait for the first token, so an early failure is a plain HTTP error."""
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="upstream", messages=user("x"), stream=True)
    assert caught.value.status_code == 502
    assert error_of(caught.value)["code"] == "upstream_error"

    body = {"model": "upstream", "messages": user("x"), "stream": True}
    response = http.post("/chat/completions", json=body, headers=auth(stack))
    assert response.status_code == 502
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-iop-provider"] == "up-1"  # the decision was made: it is told
    assert response.json()["error"]["code"] == "upstream_error"


def test_no_provider_gets_503_with_retry_after(client):
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="offline", messages=user("x"))
    assert caught.value.status_code == 503
    assert error_of(caught.value)["code"] == "no_provider_available"
    assert int(caught.value.response.headers["retry-after"]) >= 1


def test_node_killed_mid_run_gets_502(stack, client):
    # A stream: the failure arrives as the stream's last event.
    node = stack.start_node("node-k")
    stream = client.chat.completions.create(model="doomed", messages=user(SLOW_TEXT), stream=True)
    first = next(iter(stream))
    assert first.choices[0].delta.content == "echo:"
    node.kill()
    with pytest.raises(openai.APIError) as caught:
        for _ in stream:
            pass
    # The headers went out with the first token: the error is the stream's last event.
    assert caught.value.body["code"] == "node_disconnected"
    assert set(caught.value.body) == {"message", "type", "param", "code"}
    stack.wait_ready("node-k", ready=False)
    stack.wait_idle("doomed")

    # Non-streaming: the whole answer is a 502.
    node = stack.start_node("node-k")
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(
            client.chat.completions.create, model="doomed", messages=user(SLOW_TEXT)
        )
        wait_until(lambda: stack.in_flight("doomed") == 1, timeout=10, what="a run on doomed")
        node.kill()
        with pytest.raises(openai.InternalServerError) as caught:
            pending.result(timeout=15)
    assert caught.value.status_code == 502
    assert error_of(caught.value)["code"] == "node_disconnected"
    stack.wait_ready("node-k", ready=False)
    stack.wait_idle("doomed")

    # With its only Node gone, the model has no provider at all.
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="doomed", messages=user("x"))
    assert caught.value.status_code == 503
