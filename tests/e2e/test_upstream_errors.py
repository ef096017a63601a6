"""Upstream errors keep their meaning, through the official SDK, a real Edge, a real Node and the
scripted upstream: a rate limit goes to another provider or comes back as a 429 with its hint; a
context-length rejection keeps its code; rejected credentials are the gateway's problem (the
provider leaves the pool with the reason in `GET /status`); a long prompt nobody can take is a
400; each usage row says what the caller saw, and where the run went.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.e2e.harness import Tokens, echo_config, wait_until

THRESHOLD = 50
LONG_TEXT = " ".join(f"lorem{i:02d}" for i in range(60))  # ~127 estimated tokens: long


def user(text: str = "hello") -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="module")
def upstream(scripted_upstream_factory):
    return scripted_upstream_factory()


@pytest.fixture(scope="module")
def stack(openai_stack_factory, upstream):
    def build_config(tokens: Tokens, public: int, admin: int) -> dict[str, Any]:
        def provider(pid: str, served: str, priority: int, **extra: Any) -> dict[str, Any]:
            return {
                "id": pid,
                "adapter": "up",
                "served_models": [served],
                "capacity": 4,
                "priority": priority,
                **extra,
            }

        config = echo_config(
            tokens,
            public,
            admin,
            threshold=THRESHOLD,
            adapters=[{"id": "up", "type": "openai_http", "base_url": upstream.base_url}],
            providers=[
                provider("limited", "status-429", 1),
                provider("backup", "ok", 2),
                provider("limited-only", "status-429", 1),
                provider("context", "status-400-context", 1),
                provider("refused", "status-401", 1),
                provider("refused-only", "status-403", 1),
                provider("short", "ok", 1, long_context_slots=0),
            ],
            models=[
                {"id": "rl", "providers": {"limited": "status-429", "backup": "ok"}},
                {"id": "rl-only", "providers": {"limited-only": "status-429"}},
                {"id": "ctx", "providers": {"context": "status-400-context", "backup": "ok"}},
                {"id": "auth", "providers": {"refused": "status-401", "backup": "ok"}},
                {"id": "auth-only", "providers": {"refused-only": "status-403"}},
                {"id": "short-only", "providers": {"short": "ok"}},
            ],
        )
        # A provider taken out stays out for the whole module: nothing depends on timing.
        config["passive_health"] = {"cooldown_s": 3600}
        return config

    stack = openai_stack_factory(build_config)
    stack.start_node("node-a")
    return stack


def served_requests(upstream, served: str) -> int:
    return sum(1 for r in upstream.requests() if r["model"] == served)


def row_of(stack, request_id: str) -> dict[str, Any]:
    return stack.wait_usage(1, request_id=request_id)[0]


@pytest.mark.parametrize("stream", [False, True])
def test_a_rate_limited_upstream_sends_the_run_to_another_provider(stack, upstream, stream):
    client = stack.client()
    request_id = f"rl-{stream}"

    if stream:
        with client.chat.completions.with_streaming_response.create(
            model="rl", messages=user(), stream=True, extra_headers={"x-request-id": request_id}
        ) as response:
            text = "".join(
                chunk.choices[0].delta.content or "" for chunk in response.parse() if chunk.choices
            )
            headers = response.headers
    else:
        response = client.chat.completions.with_raw_response.create(
            model="rl", messages=user(), extra_headers={"x-request-id": request_id}
        )
        text, headers = response.parse().choices[0].message.content, response.headers

    assert text == "echo: hello"
    assert headers["x-iop-provider"] == "backup"
    assert (headers["x-iop-attempts"], headers["x-iop-providers-tried"]) == ("2", "limited,backup")
    row = row_of(stack, request_id)
    assert (row["status"], row["provider"], row["attempts"], row["providers_tried"]) == (
        "ok",
        "backup",
        2,
        "limited,backup",
    )


def test_a_rate_limit_with_no_other_provider_is_a_429_with_the_upstreams_hint(stack):
    client = stack.client()

    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(
            model="rl-only", messages=user(), extra_headers={"x-request-id": "rl-only-1"}
        )

    response = caught.value.response
    assert (response.headers["retry-after"], response.headers["retry-after-ms"]) == ("2", "2000")
    assert caught.value.code == "rate_limit_exceeded"
    assert response.headers["x-iop-providers-tried"] == "limited-only"
    row = row_of(stack, "rl-only-1")
    assert (row["status"], row["attempts"]) == ("rate_limit_exceeded", 1)


def test_a_context_length_rejection_keeps_its_code_and_message_and_goes_nowhere_else(
    stack, upstream
):
    client = stack.client()
    before = served_requests(upstream, "ok")

    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="ctx", messages=user(), extra_headers={"x-request-id": "ctx-1"}
        )

    assert caught.value.code == "context_length_exceeded"
    # The upstream's own words, as clients that parse them (e.g. LangChain) expect.
    assert caught.value.body["message"].startswith("This model's maximum context length is")
    assert served_requests(upstream, "ok") == before  # the request is to blame: not retried
    assert row_of(stack, "ctx-1")["status"] == "context_length_exceeded"


def test_rejected_credentials_take_the_provider_out_and_others_take_the_traffic(stack, upstream):
    client = stack.client()

    first = client.chat.completions.with_raw_response.create(
        model="auth", messages=user(), extra_headers={"x-request-id": "auth-1"}
    )
    assert first.headers["x-iop-providers-tried"] == "refused,backup"
    provider = stack.status()["providers"]["refused"]
    assert (provider["healthy"], provider["passive_state"], provider["passive_reason"]) == (
        False,
        "open",
        "upstream_auth_failed",
    )

    refused_before = served_requests(upstream, "status-401")
    second = client.chat.completions.with_raw_response.create(
        model="auth", messages=user(), extra_headers={"x-request-id": "auth-2"}
    )

    assert second.parse().choices[0].message.content == "echo: hello"
    assert (second.headers["x-iop-attempts"], second.headers["x-iop-provider"]) == ("1", "backup")
    assert served_requests(upstream, "status-401") == refused_before
    assert row_of(stack, "auth-2")["providers_tried"] == "backup"


def test_rejected_credentials_with_no_other_provider_are_a_502_upstream_auth_failed(stack):
    client = stack.client()

    for attempt in (1, 2):  # the provider is out after the first: the meaning stays
        with pytest.raises(openai.InternalServerError) as caught:
            client.chat.completions.create(
                model="auth-only",
                messages=user(),
                extra_headers={"x-request-id": f"auth-only-{attempt}"},
            )
        assert caught.value.status_code == 502
        assert caught.value.code == "upstream_auth_failed"
        assert "Scripted upstream error" not in caught.value.message
        assert row_of(stack, f"auth-only-{attempt}")["status"] == "upstream_auth_failed"


def test_a_long_prompt_no_provider_can_ever_take_is_a_400(stack):
    client = stack.client()

    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="short-only", messages=user(LONG_TEXT), extra_headers={"x-request-id": "long-1"}
        )

    assert caught.value.code == "context_length_exceeded"
    assert "retry-after" not in caught.value.response.headers
    row = row_of(stack, "long-1")
    assert (row["status"], row["attempts"], row["context_class"]) == (
        "context_length_exceeded",
        0,
        "",
    )


def test_the_nodes_health_detail_is_in_the_status(stack):
    provider = wait_until(
        lambda: stack.status()["providers"]["backup"]["health_detail"] or None,
        what="the Node's first health report",
    )

    assert "HTTP 200" in provider
