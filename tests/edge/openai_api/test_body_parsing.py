"""Reading the body: nesting past the limit and a lone surrogate in `model` are 400s naming it."""

from __future__ import annotations

import json

import pytest

from edge.openai_api.errors import APIError
from edge.openai_api.requests import MAX_JSON_DEPTH, parse_chat_request, parse_json_body


def nested(depth: int, inner: bytes = b"1") -> bytes:
    """A chat body with ``depth`` levels of arrays and objects in all (the body's own counts)."""
    arrays = depth - 1
    return b'{"model":"m","messages":[],"x":' + b"[" * arrays + inner + b"]" * arrays + b"}"


def refusal(raw: bytes) -> APIError:
    with pytest.raises(APIError) as caught:
        parse_json_body(raw)
    return caught.value


def test_a_body_at_the_depth_limit_is_read() -> None:
    assert parse_json_body(nested(MAX_JSON_DEPTH))["model"] == "m"


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 970, 100_000])
def test_a_body_nested_past_the_limit_is_a_400(depth: int) -> None:
    # 970 levels parse, but encoding them again for the wire hits Python's recursion limit.
    error = refusal(nested(depth))

    assert (error.status, error.code) == (400, "invalid_request")
    assert error.message == f"The request body is nested more than {MAX_JSON_DEPTH} levels deep."


@pytest.mark.parametrize(
    "text",
    [
        "[" * 500,  # brackets inside a string are not nesting
        '\\"[[[[' * 100,  # nor after an escaped quote
        "\\" * 7 + "[" * 300,  # nor after escaped backslashes
    ],
)
def test_brackets_in_strings_do_not_count(text: str) -> None:
    raw = json.dumps({"model": "m", "messages": [{"role": "user", "content": text}]}).encode()

    assert parse_json_body(raw)["messages"][0]["content"] == text


def test_many_shallow_arrays_are_fine() -> None:
    raw = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}] * 5000})

    assert len(parse_json_body(raw.encode())["messages"]) == 5000


def test_invalid_json_nested_deeply_is_still_a_400() -> None:
    assert refusal(b"[" * 100_000).status == 400


def test_a_lone_surrogate_in_the_model_is_refused_naming_it() -> None:
    body = parse_json_body(b'{"model": "\\ud800", "messages": [{"role": "user", "content": "x"}]}')

    with pytest.raises(APIError) as caught:
        parse_chat_request(body)

    assert (caught.value.status, caught.value.param) == (400, "model")


def test_a_lone_surrogate_in_the_content_goes_on() -> None:
    body = parse_json_body(b'{"model": "m", "messages": [{"role": "user", "content": "\\ud800"}]}')

    assert parse_chat_request(body).body["messages"][0]["content"] == "\ud800"
