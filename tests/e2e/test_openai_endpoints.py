"""The official `openai` SDK against a real Edge and a real echo Node: every endpoint but chat.

Model retrieval, embeddings (the exact vectors echo derives from each input), completions and the
Responses API (streamed and not, `previous_response_id` going back to the provider that served the
response), a model that serves embeddings only, CORS, and a base URL without `/v1`; the OpenAI
API served by daphne, then by uvicorn (`openai.server`).
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from nodes.agent.adapters.echo_embeddings import echo_embedding
from tests.e2e.harness import Tokens, echo_config

ORIGIN = "https://app.example.com"
ECHO = {"served_models": ["echo-small"], "capacity": 4}


def _config(tokens: Tokens, public: int, admin: int) -> dict[str, Any]:
    config = echo_config(
        tokens,
        public,
        admin,
        # Two providers of one priority take turns: a follow-up that stays put is pinned.
        providers=[
            {"id": "echo-1", "adapter": "echo", **ECHO},
            {"id": "echo-2", "adapter": "echo", **ECHO},
        ],
        models=[
            {"id": "echo", "providers": {"echo-1": "echo-small", "echo-2": "echo-small"}},
            {
                "id": "embedder",
                "providers": {"echo-1": "echo-small"},
                "endpoints": ["embeddings"],
            },
            {
                "id": "capped",
                "providers": {"echo-1": "echo-small"},
                "generation": {"default_max_tokens": 2, "max_tokens_limit": 5},
            },
        ],
    )
    config["openai"]["cors"] = {"allowed_origins": [ORIGIN]}
    return config


@pytest.fixture(scope="module")
def stack(openai_stack_factory: Any, openai_server: str) -> Any:
    stack = openai_stack_factory(_config, server=openai_server)
    stack.start_node("node-a")
    return stack


@pytest.fixture(scope="module")
def client(stack: Any) -> openai.OpenAI:
    return stack.client()


def test_a_model_is_retrieved_and_an_unknown_one_is_404(client: openai.OpenAI) -> None:
    model = client.models.retrieve("embedder")
    assert (model.id, model.object, model.owned_by) == ("embedder", "model", "edge-test")
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("no-such-model")
    assert caught.value.code == "model_not_found"
    assert caught.value.body["type"] == "invalid_request_error"


def test_embeddings_are_echo_s_vectors_and_metered(stack: Any, client: openai.OpenAI) -> None:
    reply = client.embeddings.with_raw_response.create(
        model="embedder", input=["alpha", "beta gamma"]
    )
    embeddings = reply.parse()
    assert embeddings.model == "embedder"
    assert [item.embedding for item in embeddings.data] == [
        echo_embedding("alpha"),
        echo_embedding("beta gamma"),
    ]
    assert embeddings.usage.prompt_tokens > 0
    assert reply.headers["x-iop-provider"] == "echo-1"
    floats = client.embeddings.create(
        model="echo", input="alpha", dimensions=16, encoding_format="float"
    )
    assert floats.data[0].embedding == echo_embedding("alpha", 16)
    request_id = reply.headers["x-request-id"]
    (row,) = stack.wait_usage(request_id=request_id)
    assert (row["endpoint"], row["status"], row["provider"]) == ("embeddings", "ok", "echo-1")
    assert row["prompt_tokens"] == embeddings.usage.prompt_tokens


def test_completions_whole_and_streamed(stack: Any, client: openai.OpenAI) -> None:
    reply = client.completions.with_raw_response.create(model="echo", prompt="say it back")
    completion = reply.parse()
    assert completion.choices[0].text == "echo: say it back"
    assert completion.model == "echo"
    assert completion.id == f"cmpl-{reply.headers['x-request-id']}"
    assert reply.headers["x-iop-attempts"] == "1"
    chunks = list(
        client.completions.create(
            model="echo", prompt="one two", stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(choice.text for chunk in chunks for choice in chunk.choices)
    assert text == "echo: one two"
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3
    (row,) = stack.wait_usage(request_id=reply.headers["x-request-id"])
    assert (row["endpoint"], row["status"]) == ("completions", "ok")


def test_generation_policy_holds_for_completions_and_responses(client: openai.OpenAI) -> None:
    cut = client.completions.create(model="capped", prompt="a b c d e f")
    assert (cut.choices[0].text, cut.choices[0].finish_reason) == ("echo: a", "length")
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="capped", prompt="x", max_tokens=6)
    assert (caught.value.code, caught.value.param) == ("max_tokens_exceeded", "max_tokens")
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="capped", input="x", max_output_tokens=6)
    assert (caught.value.code, caught.value.param) == ("max_tokens_exceeded", "max_output_tokens")
    short = client.responses.create(model="capped", input="a b c d")
    assert (short.output_text, short.status) == ("echo: a", "incomplete")


def test_responses_whole_and_streamed(stack: Any, client: openai.OpenAI) -> None:
    reply = client.responses.with_raw_response.create(model="echo", input="hello there")
    response = reply.parse()
    assert response.output_text == "echo: hello there"
    assert response.model == "echo"
    assert response.id.startswith("resp_")
    assert response.usage is not None and response.usage.output_tokens == 3
    (row,) = stack.wait_usage(request_id=reply.headers["x-request-id"])
    assert (row["endpoint"], row["status"], row["completion_tokens"]) == ("responses", "ok", 3)

    events = list(client.responses.create(model="echo", input="streamed words", stream=True))
    types = [event.type for event in events]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == "echo: streamed words"
    assert events[-1].response.output_text == deltas
    assert events[-1].response.model == "echo"


def test_a_follow_up_goes_to_the_provider_that_holds_the_response(client: openai.OpenAI) -> None:
    first = client.responses.with_raw_response.create(model="echo", input="remember me")
    holder = first.headers["x-iop-provider"]
    previous = first.parse().id
    followers = []
    for _ in range(4):
        follow = client.responses.with_raw_response.create(
            model="echo", input="and now?", previous_response_id=previous
        )
        followers.append(follow.headers["x-iop-provider"])
    assert followers == [holder] * 4
    # The same requests without the id take turns between the two providers.
    free = [
        client.responses.with_raw_response.create(model="echo", input="x").headers["x-iop-provider"]
        for _ in range(4)
    ]
    assert set(free) == {"echo-1", "echo-2"}
    # A streamed response is remembered as well.
    stream = client.responses.with_raw_response.create(model="echo", input="s", stream=True)
    streamed_by = stream.headers["x-iop-provider"]
    streamed_id = next(iter(stream.parse())).response.id
    for _ in range(2):
        follow = client.responses.with_raw_response.create(
            model="echo", input="more", previous_response_id=streamed_id
        )
        assert follow.headers["x-iop-provider"] == streamed_by


def test_an_endpoint_the_model_does_not_serve_is_a_400(stack: Any, client: openai.OpenAI) -> None:
    for call in (
        lambda: client.chat.completions.create(
            model="embedder", messages=[{"role": "user", "content": "hi"}]
        ),
        lambda: client.completions.create(model="embedder", prompt="hi"),
        lambda: client.responses.create(model="embedder", input="hi"),
    ):
        with pytest.raises(openai.BadRequestError) as caught:
            call()
        assert caught.value.code == "endpoint_not_supported"
        assert caught.value.param == "model"
        assert "serves: embeddings" in caught.value.message
    rows = stack.wait_usage(3, model="embedder", status="endpoint_not_supported")
    assert {row["endpoint"] for row in rows} == {"chat.completions", "completions", "responses"}


def test_cors_preflight_and_answers(stack: Any, client: openai.OpenAI) -> None:
    url = f"{stack.edge.openai_url}/v1/chat/completions"
    asked = {
        "Origin": ORIGIN,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os",
    }
    preflight = httpx.options(url, headers=asked, timeout=10)
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == ORIGIN
    assert preflight.headers["vary"] == "Origin"
    assert "POST" in preflight.headers["access-control-allow-methods"]
    allowed = preflight.headers["access-control-allow-headers"].split(", ")
    assert {"authorization", "content-type", "x-stainless-os"} <= set(allowed)
    assert int(preflight.headers["access-control-max-age"]) > 0

    other = httpx.options(url, headers={**asked, "Origin": "https://evil.example"}, timeout=10)
    assert other.status_code == 204
    assert "access-control-allow-origin" not in other.headers

    headers = {"Origin": ORIGIN, "Authorization": f"Bearer {stack.tokens.client('app-1')}"}
    answer = httpx.get(f"{stack.edge.openai_url}/v1/models", headers=headers, timeout=10)
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == ORIGIN
    assert "x-iop-provider" in answer.headers["access-control-expose-headers"]
    models = f"{stack.edge.openai_url}/v1/models"
    refused = httpx.get(models, headers={"Origin": ORIGIN}, timeout=10)
    assert refused.status_code == 401  # CORS headers on errors too, so the page can read them
    assert refused.headers["access-control-allow-origin"] == ORIGIN


def test_a_base_url_without_v1_serves_the_same_paths(stack: Any) -> None:
    bare = openai.OpenAI(
        base_url=stack.edge.openai_url,
        api_key=stack.tokens.client("app-1"),
        max_retries=0,
        timeout=30,
    )
    try:
        assert [model.id for model in bare.models.list()] == ["echo", "embedder", "capped"]
        assert bare.models.retrieve("echo").id == "echo"
        chat = bare.chat.completions.create(
            model="echo", messages=[{"role": "user", "content": "bare"}]
        )
        assert chat.choices[0].message.content == "echo: bare"
        assert bare.completions.create(model="echo", prompt="p").choices[0].text == "echo: p"
        vector = bare.embeddings.create(model="echo", input="v").data[0].embedding
        assert vector == echo_embedding("v")
        assert bare.responses.create(model="echo", input="r").output_text == "echo: r"
    finally:
        bare.close()
    # The admin keeps its own paths on the public listener.
    admin = httpx.get(f"{stack.edge.base_url}/admin/login/", timeout=10)
    assert admin.status_code == 200
