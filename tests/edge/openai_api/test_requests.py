"""Reading a chat request and applying a model's generation policy."""

from __future__ import annotations

from typing import Any

import pytest

from edge.config.schema import Generation
from edge.openai_api.errors import APIError
from edge.openai_api.requests import apply_generation_policy, parse_chat_request

POLICY = Generation(default_max_tokens=64, max_tokens_limit=1000)
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("limits", "param"),
    [
        ({"max_tokens": 1001}, "max_tokens"),
        ({"max_completion_tokens": 1001}, "max_completion_tokens"),
        ({"max_completion_tokens": None, "max_tokens": 100000}, "max_tokens"),
        ({"max_completion_tokens": 10, "max_tokens": 100000}, "max_tokens"),
        ({"max_completion_tokens": 100000, "max_tokens": None}, "max_completion_tokens"),
    ],
)
def test_the_limit_holds_for_whichever_name_the_caller_sent(
    limits: dict[str, Any], param: str
) -> None:
    with pytest.raises(APIError) as caught:
        apply_generation_policy({"messages": MESSAGES, **limits}, POLICY)
    assert (caught.value.status, caught.value.code, caught.value.param) == (
        400,
        "max_tokens_exceeded",
        param,
    )


@pytest.mark.parametrize(
    ("limits", "sent"),
    [
        ({}, {"max_tokens": 64}),
        ({"max_tokens": None}, {"max_tokens": 64}),
        ({"max_completion_tokens": None}, {"max_completion_tokens": None, "max_tokens": 64}),
        ({"max_completion_tokens": 1000}, {"max_completion_tokens": 1000}),
        (
            {"max_completion_tokens": None, "max_tokens": 5},
            {"max_completion_tokens": None, "max_tokens": 5},
        ),
    ],
)
def test_the_default_fills_in_only_when_no_limit_was_sent(
    limits: dict[str, Any], sent: dict[str, Any]
) -> None:
    assert apply_generation_policy({"messages": MESSAGES, **limits}, POLICY) == {
        "messages": MESSAGES,
        **sent,
    }


@pytest.mark.parametrize("n", [None, 1, 2, 128])
def test_it_takes_n_choices(n: int | None) -> None:
    request = parse_chat_request({"model": "m", "messages": MESSAGES, "n": n})
    assert request.body["n"] == n


@pytest.mark.parametrize("n", [0, -1, 129, True, 2.0, "2"])
def test_it_refuses_an_n_that_is_not_a_count_of_choices(n: Any) -> None:
    with pytest.raises(APIError) as caught:
        parse_chat_request({"model": "m", "messages": MESSAGES, "n": n})
    assert (caught.value.status, caught.value.param) == (400, "n")
    assert caught.value.message == "'n' must be an integer from 1 to 128."
