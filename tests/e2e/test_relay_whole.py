"""Answers arrive as the upstream sent them, through a real Edge, a real Node and the scripted
upstream, seen with the official SDK: every field of a completion, one usage chunk when asked,
n choices, llama.cpp's cut after [DONE], a server that only knows max_tokens, probes.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import OpenAIStack, ScriptedUpstream
from tests.e2e.harness import Tokens, echo_config, wait_until
from tests.e2e.upstream_server import FINGERPRINT, SERVICE_TIER, Answer

NODE = "node-relay"
LIMIT = 1000


@pytest.fixture(scope="module")
def silent_port() -> Iterator[int]:
    """An upstream that accepts connections and never answers: a socket nobody reads."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


def adapter(adapter_id: str, base_url: str, **options: Any) -> dict[str, Any]:
    return {"id": adapter_id, "type": "openai_http", "base_url": base_url, **options}


def provider(provider_id: str, adapter_id: str, *served: str) -> dict[str, Any]:
    return {"id": provider_id, "adapter": adapter_id, "served_models": list(served), "capacity": 8}


@pytest.fixture(scope="module")
def stack(
    openai_stack_factory: Callable[..., OpenAIStack],
    scripted_upstream: ScriptedUpstream,
    scripted_upstream_factory: Callable[..., ScriptedUpstream],
    silent_port: int,
) -> OpenAIStack:
    up = scripted_upstream.base_url
    bare = scripted_upstream_factory(models=False).base_url  # no GET /models, as many servers

    def build(tokens: Tokens, public: int, admin: int) -> dict[str, Any]:
        return echo_config(
            tokens,
            public,
            admin,
            node_id=NODE,
            adapters=[
                adapter("up", up),
                adapter("short", up, max_tokens_param="max_tokens"),
                adapter("bare", bare, health_path=False),
                adapter("bare-probed", bare),
                # Its probe never answers, and nothing times it out while the tests run.
                adapter("silent", f"http://127.0.0.1:{silent_port}/v1", timeout_s=3600),
            ],
            providers=[
                provider(
                    "p-up",
                    "up",
                    "ok",
                    "reasoning",
                    "double-usage",
                    "cut-after-done",
                    "max-tokens-only",
                ),
                provider("p-short", "short", "max-tokens-only"),
                provider("p-bare", "bare", "ok"),
                provider("p-bare-probed", "bare-probed", "ok"),
                provider("p-silent", "silent", "ok"),
            ],
            models=[
                {"id": "ok", "providers": {"p-up": "ok"}},
                {"id": "reasoning", "providers": {"p-up": "reasoning"}},
                {"id": "litellm", "providers": {"p-up": "double-usage"}},
                {"id": "llamacpp", "providers": {"p-up": "cut-after-done"}},
                {"id": "as-sent", "providers": {"p-up": "max-tokens-only"}},
                {"id": "max-tokens-only", "providers": {"p-short": "max-tokens-only"}},
                {"id": "bare", "providers": {"p-bare": "ok"}},
                {
                    "id": "limited",
                    "providers": {"p-up": "ok"},
                    "generation": {"max_tokens_limit": LIMIT},
                },
            ],
        )

    stack = openai_stack_factory(build, name="relay-whole")
    stack.start_node(NODE)
    return stack


@pytest.fixture(scope="module")
def client(stack: OpenAIStack) -> openai.OpenAI:
    return stack.client()


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def last_request(upstream: ScriptedUpstream, text: str) -> dict[str, Any]:
    """The body of the last chat request the upstream got whose last message says ``text``."""
    return next(
        r["body"]
        for r in reversed(upstream.requests())
        if r["path"].endswith("/chat/completions") and r["body"]["messages"][-1]["content"] == text
    )


def without(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {key: value for key, value in data.items() if key not in keys}


def test_a_completion_comes_back_as_the_upstream_sent_it(
    client: openai.OpenAI, scripted_upstream: ScriptedUpstream
) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="reasoning",
        messages=user("relay it whole"),
        n=2,
        logprobs=True,
        extra_headers={"x-request-id": "relay-whole-1"},
    )
    body = raw.http_response.json()

    # What the upstream answered that request, but for its own id and time.
    sent = last_request(scripted_upstream, "relay it whole")
    assert sent["n"] == 2 and sent["logprobs"] is True
    expected = Answer(sent).completion()
    assert without(body, "id", "created", "model") == without(expected, "id", "created", "model")
    assert (body["id"], body["model"]) == ("chatcmpl-relay-whole-1", "reasoning")

    completion = raw.parse()
    assert (completion.system_fingerprint, completion.service_tier) == (FINGERPRINT, SERVICE_TIER)
    assert [c.index for c in completion.choices] == [0, 1]
    choice = completion.choices[0]
    assert choice.message.content == "echo: relay it whole"
    assert choice.message.refusal is None
    assert choice.message.model_extra["reasoning_content"] == "Thinking about relay it whole"
    assert "".join(t.token for t in choice.logprobs.content) == "echo: relay it whole"
    assert completion.usage.completion_tokens_details.reasoning_tokens > 0
    assert completion.usage.prompt_tokens_details.cached_tokens == 0


def test_a_stream_relays_every_chunk_and_one_usage_chunk_with_its_details(
    client: openai.OpenAI,
) -> None:
    chunks = list(
        client.chat.completions.create(
            model="reasoning",
            messages=user("stream it whole"),
            n=2,
            logprobs=True,
            stream=True,
            stream_options={"include_usage": True},
        )
    )

    *answer, usage_chunk = chunks
    assert usage_chunk.choices == []
    assert usage_chunk.usage.completion_tokens_details.reasoning_tokens > 0
    assert usage_chunk.usage.prompt_tokens_details is not None
    assert all(c.usage is None for c in answer)
    assert {c.system_fingerprint for c in answer} == {FINGERPRINT}
    assert {c.model for c in chunks} == {"reasoning"}
    for index in (0, 1):
        mine = [choice for c in answer for choice in c.choices if choice.index == index]
        assert "".join(c.delta.content or "" for c in mine) == "echo: stream it whole"
        reasoning = "".join(
            (c.delta.model_extra or {}).get("reasoning_content") or "" for c in mine
        )
        assert reasoning == "Thinking about stream it whole"
        tokens = [t.token for c in mine if c.logprobs for t in c.logprobs.content or ()]
        assert "".join(tokens) == "echo: stream it whole"
        # The upstream's own closing chunk, once per choice: the Edge adds none.
        assert [c.finish_reason for c in mine if c.finish_reason] == ["stop"]


@pytest.mark.parametrize("include_usage", [True, False])
def test_a_litellm_stream_with_two_usage_chunks_gives_one_only_when_asked(
    client: openai.OpenAI, scripted_upstream: ScriptedUpstream, include_usage: bool
) -> None:
    text = f"count once {include_usage}"
    chunks = list(
        client.chat.completions.create(
            model="litellm",
            messages=user(text),
            stream=True,
            stream_options={"include_usage": include_usage},
        )
    )

    usage_chunks = [c for c in chunks if c.usage is not None]
    assert len(usage_chunks) == (1 if include_usage else 0)
    if include_usage:
        assert chunks[-1] is usage_chunks[0]
        assert usage_chunks[0].usage.total_tokens > 0
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == f"echo: {text}"
    # The Node asks for usage anyway: it meters every run.
    assert last_request(scripted_upstream, text)["stream_options"] == {"include_usage": True}


def test_a_llama_cpp_stream_cut_right_after_done_completes(
    stack: OpenAIStack, client: openai.OpenAI
) -> None:
    chunks = list(
        client.chat.completions.create(
            model="llamacpp",
            messages=user("cut after done"),
            stream=True,
            extra_headers={"x-request-id": "relay-llamacpp"},
        )
    )

    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "echo: cut after done"
    assert chunks[-1].choices[0].finish_reason == "stop"
    [row] = stack.wait_usage(request_id="relay-llamacpp")
    assert row["status"] == "ok"


def test_a_server_that_only_knows_max_tokens_gets_the_callers_limit_under_that_name(
    client: openai.OpenAI,
) -> None:
    mapped = client.chat.completions.create(
        model="max-tokens-only", messages=user("limit"), max_completion_tokens=7
    )
    as_sent = client.chat.completions.create(
        model="as-sent", messages=user("limit"), max_completion_tokens=7
    )

    assert mapped.choices[0].message.content == "max_tokens=7"
    assert as_sent.choices[0].message.content == "max_tokens=None"  # by default: as sent


def test_a_null_max_completion_tokens_does_not_get_a_max_tokens_past_the_limit(
    stack: OpenAIStack, scripted_upstream: ScriptedUpstream
) -> None:
    response = httpx.post(
        stack.edge.completions_url,
        json={
            "model": "limited",
            "messages": user("unbounded"),
            "max_completion_tokens": None,
            "max_tokens": 100000,
        },
        headers={"Authorization": f"Bearer {stack.tokens.client('app-1')}"},
        timeout=30,
    )

    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("max_tokens_exceeded", "max_tokens")
    assert not [
        r
        for r in scripted_upstream.requests()
        if (r["body"] or {}).get("messages") == user("unbounded")
    ]


def test_an_upstream_without_models_serves_when_its_probe_is_off(
    stack: OpenAIStack, client: openai.OpenAI
) -> None:
    completion = client.chat.completions.create(model="bare", messages=user("no models here"))

    assert completion.choices[0].message.content == "echo: no models here"
    providers = stack.status()["providers"]
    assert providers["p-bare"]["healthy"] is True
    assert providers["p-bare"]["health_detail"] == "not probed (health_path: false)"


def test_a_failing_probe_says_why_on_the_edge_and_in_the_nodes_log(stack: OpenAIStack) -> None:
    reason = "GET /models: HTTP 404"
    wait_until(
        lambda: stack.status()["providers"]["p-bare-probed"]["health_detail"] == reason,
        what="the failing probe's reason in /status",
    )
    assert stack.status()["providers"]["p-bare-probed"]["healthy"] is False
    assert f"adapter bare-probed is unhealthy: {reason}" in stack.nodes[NODE].log()


def test_a_probe_that_never_answers_holds_back_no_other_provider(stack: OpenAIStack) -> None:
    wait_until(
        lambda: stack.status()["providers"]["p-up"]["health_detail"] == "GET /models: HTTP 200",
        what="p-up's probe to be reported",
    )
    # The silent upstream's probe is still waiting: nothing was reported for it.
    assert stack.status()["providers"]["p-silent"]["health_detail"] == ""
