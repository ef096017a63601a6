"""The character-based input-token estimate."""

from __future__ import annotations

from typing import Any

import pytest

from edge.dispatch import estimate_input_tokens
from edge.dispatch.estimate import (
    TOKENS_PER_MESSAGE,
    TOKENS_PER_NON_TEXT_PART,
    TOKENS_PER_REPLY,
)

ONE_MESSAGE = TOKENS_PER_REPLY + TOKENS_PER_MESSAGE


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({}, 0),
        ({"messages": []}, TOKENS_PER_REPLY),
        ({"messages": [{"role": "user", "content": ""}]}, ONE_MESSAGE),
        ({"messages": [{"role": "user", "content": "abcd"}]}, ONE_MESSAGE + 1),
        ({"messages": [{"role": "user", "content": "abcde"}]}, ONE_MESSAGE + 2),
        (
            {
                "messages": [
                    {"role": "system", "content": "a" * 40},
                    {"role": "user", "content": "b" * 40},
                ]
            },
            TOKENS_PER_REPLY + 2 * TOKENS_PER_MESSAGE + 20,
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "a" * 6},
                            {"type": "text", "text": "b" * 6},
                        ],
                    }
                ]
            },
            ONE_MESSAGE + 3,
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "describe"},
                            {"type": "image_url", "image_url": {"url": "data:..." + "x" * 999}},
                        ],
                    }
                ]
            },
            ONE_MESSAGE + 2 + TOKENS_PER_NON_TEXT_PART,
        ),
        (
            {"messages": [{"role": "user", "name": "abcdefgh", "content": "abcd"}]},
            ONE_MESSAGE + 3,
        ),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {"type": "function", "function": {"name": "f", "arguments": "{}x"}}
                        ],
                    }
                ]
            },
            ONE_MESSAGE + 1,
        ),
        ({"prompt": "a" * 400}, 100),
        ({"prompt": ["a" * 4, "b" * 4]}, 2),
        ({"prompt": [1, 2, 3]}, 3),
        ({"prompt": [[1, 2], [3]]}, 3),
        ({"prompt": "héllo wörld"}, 3),
    ],
    ids=[
        "empty-body",
        "no-messages",
        "empty-content",
        "exactly-four-chars",
        "rounds-up",
        "two-messages",
        "text-parts",
        "image-part-flat",
        "name-counts",
        "tool-call-arguments",
        "prompt-string",
        "prompt-strings",
        "prompt-token-ids",
        "prompt-token-id-lists",
        "counts-characters-not-bytes",
    ],
)
def test_it_estimates_input_tokens(body: dict[str, Any], expected: int) -> None:
    assert estimate_input_tokens(body) == expected


@pytest.mark.parametrize(
    "body",
    [
        {"messages": "not a list"},
        {"messages": [None, 3, "text"]},
        {"messages": [{"role": "user", "content": 42}]},
        {"messages": [{"role": "user", "content": [None, 7]}]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": None}]}]},
        {"messages": [{"role": "assistant", "tool_calls": [None, {"function": "x"}]}]},
        {"prompt": None},
        {"prompt": {"text": "x"}},
        {"prompt": [None, 1.5]},
    ],
)
def test_it_never_fails_on_shapes_it_does_not_know(body: dict[str, Any]) -> None:
    assert estimate_input_tokens(body) >= 0


def test_it_grows_with_the_conversation() -> None:
    short = {"messages": [{"role": "user", "content": "x" * 1000}]}
    longer = {"messages": [*short["messages"], {"role": "assistant", "content": "y" * 1000}]}

    assert estimate_input_tokens(longer) > estimate_input_tokens(short) >= 250
