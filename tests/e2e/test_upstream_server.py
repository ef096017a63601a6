"""The scripted upstream itself, over plain HTTP: each served model name behaves as documented."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import ScriptedUpstream

USER = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def client(scripted_upstream: ScriptedUpstream) -> httpx.Client:
    with httpx.Client(base_url=scripted_upstream.base_url, timeout=30) as client:
        yield client


def chat(client: httpx.Client, model: str, **body: Any) -> httpx.Response:
    return client.post("/chat/completions", json={"model": model, "messages": USER, **body})


def events(response: httpx.Response) -> list[Any]:
    """The SSE ``data:`` payloads of a stream, ``[DONE]`` kept as the string."""
    lines = [line for line in response.text.split("\n") if line.startswith("data: ")]
    return [
        line[6:] if line == "data: [DONE]" else json.loads(line.removeprefix("data: "))
        for line in lines
    ]


def streamed_content(chunks: list[Any], key: str = "content") -> str:
    return "".join(
        c["choices"][0]["delta"].get(key) or ""
        for c in chunks
        if isinstance(c, dict) and c["choices"]
    )


def test_ok_answers_with_the_last_user_text_and_full_usage(client: httpx.Client) -> None:
    body = chat(client, "ok", n=2).json()
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "echo: hello there"}
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["choices"][0]["logprobs"] is None
    assert body["system_fingerprint"] and body["service_tier"]
    assert body["model"] == "ok"
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert "cached_tokens" in usage["prompt_tokens_details"]
    assert "reasoning_tokens" in usage["completion_tokens_details"]


def test_ok_gives_logprobs_when_asked(client: httpx.Client) -> None:
    choice = chat(client, "ok", logprobs=True).json()["choices"][0]
    tokens = [entry["token"] for entry in choice["logprobs"]["content"]]
    assert "".join(tokens) == "echo: hello there"


def test_ok_streams_deltas_a_finish_chunk_a_usage_chunk_and_done(client: httpx.Client) -> None:
    response = chat(client, "ok", stream=True, stream_options={"include_usage": True}, n=2)
    assert response.headers["content-type"].startswith("text/event-stream")
    chunks = events(response)
    assert chunks[-1] == "[DONE]"
    usage_chunk, finish_chunk = chunks[-2], chunks[-3]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens_details"]
    assert [c["finish_reason"] for c in finish_chunk["choices"]] == ["stop", "stop"]
    assert streamed_content(chunks) == "echo: hello there"
    assert {c["choices"][1]["index"] for c in chunks[:-2]} == {1}
    assert all(c["system_fingerprint"] and c["service_tier"] for c in chunks[:-1])


def test_ok_streams_without_a_usage_chunk_unless_asked(client: httpx.Client) -> None:
    chunks = events(chat(client, "ok", stream=True))
    assert chunks[-1] == "[DONE]"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert all(c["choices"] for c in chunks[:-1])


def test_reasoning_adds_reasoning_content_and_refusal(client: httpx.Client) -> None:
    message = chat(client, "reasoning").json()["choices"][0]["message"]
    assert message["reasoning_content"] and message["content"] == "echo: hello there"
    assert "refusal" in message and message["refusal"] is None
    chunks = events(chat(client, "reasoning", stream=True))
    assert streamed_content(chunks, "reasoning_content")
    first_content = next(i for i, c in enumerate(chunks) if c["choices"][0]["delta"].get("content"))
    assert all(
        "reasoning_content" not in c["choices"][0]["delta"] for c in chunks[first_content:-1]
    )
    assert streamed_content(chunks) == "echo: hello there"


def test_big_answers_exactly_n_bytes_streamed_in_16_kib_deltas(client: httpx.Client) -> None:
    size = 40_000
    assert len(chat(client, f"big-{size}").json()["choices"][0]["message"]["content"]) == size
    chunks = events(chat(client, f"big-{size}", stream=True))
    deltas = [c["choices"][0]["delta"].get("content") for c in chunks[:-1]]
    sizes = [len(d) for d in deltas if d]
    assert sizes == [16384, 16384, size - 2 * 16384]


@pytest.mark.parametrize(
    ("model", "status", "code"),
    [
        ("status-400-context", 400, "context_length_exceeded"),
        ("status-401", 401, "invalid_api_key"),
        ("status-403", 403, "permission_denied"),
        ("status-429", 429, "rate_limit_exceeded"),
        ("status-500", 500, "internal_error"),
        ("status-503", 503, "service_unavailable"),
    ],
)
def test_status_answers_that_status_with_an_openai_envelope(
    client: httpx.Client, model: str, status: int, code: str
) -> None:
    for stream in (False, True):
        response = chat(client, model, stream=stream)
        assert response.status_code == status
        error = response.json()["error"]
        assert error["code"] == code and error["message"] and error["type"]
        expected_retry = "2" if status in (429, 503) else None
        assert response.headers.get("retry-after") == expected_retry
    if model == "status-400-context":
        assert "maximum context length is 4096 tokens" in error["message"]


def test_cut_after_done_cuts_the_connection_after_done(scripted_upstream: ScriptedUpstream) -> None:
    lines: list[str] = []
    with (
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream(
            "POST",
            f"{scripted_upstream.base_url}/chat/completions",
            json={"model": "cut-after-done", "messages": USER, "stream": True},
            timeout=10,
        ) as response,
    ):
        for line in response.iter_lines():
            lines.append(line)
    data = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks)
    assert streamed_content(chunks) == "echo: hello there"


def test_double_usage_sends_two_usage_chunks(client: httpx.Client) -> None:
    chunks = events(chat(client, "double-usage", stream=True))
    usage_chunks = [c for c in chunks[:-1] if c.get("usage")]
    assert len(usage_chunks) == 2 and all(c["choices"] == [] for c in usage_chunks)


def test_hang_never_answers(scripted_upstream: ScriptedUpstream) -> None:
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{scripted_upstream.base_url}/chat/completions",
            json={"model": "hang", "messages": USER},
            timeout=httpx.Timeout(10, read=0.5),
        )


def test_hang_after_k_stalls_after_k_deltas(scripted_upstream: ScriptedUpstream) -> None:
    contents: list[str] = []
    with (
        httpx.stream(
            "POST",
            f"{scripted_upstream.base_url}/chat/completions",
            json={"model": "hang-after-3", "messages": USER, "stream": True},
            timeout=httpx.Timeout(10, read=0.5),
        ) as response,
        pytest.raises(httpx.ReadTimeout),
    ):
        for line in response.iter_lines():
            if line.startswith("data: "):
                delta = json.loads(line[6:])["choices"][0]["delta"]
                if delta.get("content"):
                    contents.append(delta["content"])
    assert len(contents) == 3


def test_slow_streams_the_ok_answer(client: httpx.Client) -> None:
    chunks = events(chat(client, "slow-20", stream=True))
    assert streamed_content(chunks) == "echo: hello there" and chunks[-1] == "[DONE]"


def test_max_tokens_only_reports_max_tokens(client: httpx.Client) -> None:
    answer = chat(client, "max-tokens-only", max_tokens=7, max_completion_tokens=99).json()
    assert answer["choices"][0]["message"]["content"] == "max_tokens=7"
    answer = chat(client, "max-tokens-only", max_completion_tokens=99).json()
    assert answer["choices"][0]["message"]["content"] == "max_tokens=None"


def test_models_lists_ok(client: httpx.Client) -> None:
    assert [m["id"] for m in client.get("/models").json()["data"]] == ["ok"]


def test_no_models_answers_404(scripted_upstream_factory: Callable[..., ScriptedUpstream]) -> None:
    upstream = scripted_upstream_factory(models=False)
    assert httpx.get(f"{upstream.base_url}/models", timeout=10).status_code == 404


def test_requests_are_logged_with_long_strings_cut_and_clear_empties_the_log(
    scripted_upstream: ScriptedUpstream, client: httpx.Client
) -> None:
    scripted_upstream.clear()
    assert scripted_upstream.requests() == []
    long = "x" * 5000
    client.post(
        "/chat/completions", json={"model": "ok", "messages": [{"role": "user", "content": long}]}
    )
    [logged] = scripted_upstream.requests()
    assert logged["path"] == "/v1/chat/completions" and logged["model"] == "ok"
    content = logged["body"]["messages"][0]["content"]
    assert content.startswith("xxx") and len(content) < 300
    scripted_upstream.clear()
    assert scripted_upstream.requests() == []
