"""Completions, embeddings and the Responses API through `openai_http` to the scripted upstream.

The official SDK, a real Edge, a real Node and `tests.e2e.upstream_server`: the upstream's answers
come back whole (its `usage` too), under the caller's model name; the Node calls the endpoint's
own upstream path with the route's served name; failover and upstream errors work as for chat;
a Responses stream that fails mid-way ends with an `error` event the SDK raises.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.e2e.harness import Tokens, echo_config


@pytest.fixture(scope="module")
def upstream(scripted_upstream_factory: Any) -> Any:
    return scripted_upstream_factory()


@pytest.fixture(scope="module")
def stack(openai_stack_factory: Any, upstream: Any) -> Any:
    def build_config(tokens: Tokens, public: int, admin: int) -> dict[str, Any]:
        def provider(pid: str, served: str, priority: int) -> dict[str, Any]:
            return {
                "id": pid,
                "adapter": "up",
                "served_models": [served],
                "capacity": 4,
                "priority": priority,
            }

        return echo_config(
            tokens,
            public,
            admin,
            adapters=[{"id": "up", "type": "openai_http", "base_url": upstream.base_url}],
            providers=[
                provider("up-ok", "served-ok", 2),
                provider("up-down", "status-503", 1),
                provider("up-broken", "stream-error", 1),
            ],
            models=[
                {"id": "m", "providers": {"up-ok": "served-ok"}},
                # Tried first, fails with a 503: the run goes on to the provider that answers.
                {"id": "flaky", "providers": {"up-down": "status-503", "up-ok": "served-ok"}},
                {"id": "broken", "providers": {"up-broken": "stream-error"}},
            ],
        )

    stack = openai_stack_factory(build_config)
    stack.start_node("node-a")
    return stack


@pytest.fixture(scope="module")
def client(stack: Any) -> openai.OpenAI:
    return stack.client()


def _paths(upstream: Any) -> list[tuple[str, str]]:
    return [(entry["path"], entry["model"]) for entry in upstream.requests()]


def test_each_endpoint_reaches_its_upstream_path(upstream: Any, client: openai.OpenAI) -> None:
    upstream.clear()
    completion = client.completions.create(model="m", prompt="hi there")
    assert completion.choices[0].text == "echo: hi there"
    assert completion.model == "m"
    assert completion.usage is not None and completion.usage.prompt_tokens > 0
    embeddings = client.embeddings.create(
        model="m", input=["ab", "cde"], dimensions=3, encoding_format="float"
    )
    assert [len(item.embedding) for item in embeddings.data] == [3, 3]
    assert embeddings.model == "m"
    response = client.responses.create(model="m", input="tell me")
    assert response.output_text == "echo: tell me"
    assert response.model == "m"
    streamed = list(client.responses.create(model="m", input="stream me", stream=True))
    assert streamed[-1].type == "response.completed"
    assert streamed[-1].response.output_text == "echo: stream me"
    paths = _paths(upstream)
    for path in ("/v1/completions", "/v1/embeddings", "/v1/responses"):
        assert (path, "served-ok") in paths


def test_completions_and_responses_fail_over(stack: Any, client: openai.OpenAI) -> None:
    reply = client.completions.with_raw_response.create(model="flaky", prompt="again")
    assert reply.parse().choices[0].text == "echo: again"
    assert reply.headers["x-iop-providers-tried"] == "up-down,up-ok"
    stream = client.responses.with_raw_response.create(model="flaky", input="go", stream=True)
    assert stream.headers["x-iop-attempts"] == "2"
    assert list(stream.parse())[-1].type == "response.completed"
    (row,) = stack.wait_usage(request_id=reply.headers["x-request-id"])
    assert (row["endpoint"], row["attempts"], row["provider"]) == ("completions", 2, "up-ok")


def test_a_responses_stream_failing_mid_way_raises_in_the_sdk(client: openai.OpenAI) -> None:
    events = []
    with pytest.raises(openai.APIError):
        for event in client.responses.create(model="broken", input="boom", stream=True):
            events.append(event.type)
    assert events and events[0] == "response.created"
