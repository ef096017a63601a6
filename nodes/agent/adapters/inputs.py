"""What a run's input is, per endpoint: the texts echo answers, and token estimates.

Each reader returns None for a shape its endpoint does not take: echo refuses such a request
(``bad_request``), while an estimate for a relayed one (the upstream judged it) counts it as 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from nodes import wire
from nodes.agent.adapters.base import CHARS_PER_TOKEN, estimate_prompt_tokens, message_text


@dataclass(frozen=True, slots=True)
class Input:
    """One prompt (completions) or input (embeddings): its text and its token count."""

    text: str
    tokens: int


def _token_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(type(t) is int for t in value)


def _input(value: Any) -> Input | None:
    if isinstance(value, str):
        return Input(value, math.ceil(len(value) / CHARS_PER_TOKEN))
    if _token_array(value):  # token ids, as text: what echo repeats and hashes
        return Input(" ".join(map(str, value)), len(value))
    return None


def text_inputs(value: Any) -> list[Input] | None:
    """A completions ``prompt`` or an embeddings ``input``: a string, a token array, or a
    non-empty list of either."""
    single = _input(value)
    if single is not None:
        return [single]
    if not isinstance(value, list) or not value:
        return None
    inputs = []
    for item in value:
        if (one := _input(item)) is None:
            return None
        inputs.append(one)
    return inputs


def _item_text(item: Any) -> str:
    """The text of one Responses input item (a message; its ``input_text`` parts)."""
    if not isinstance(item, dict):
        return ""
    content = item.get("content")
    if isinstance(content, list):
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and part.get("type") in ("input_text", "text")
        )
    return message_text(content)


def response_input_text(value: Any) -> str | None:
    """What a Responses ``input`` says last: the string, or the last user message's text."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        return None
    users = [item for item in value if isinstance(item, dict) and item.get("role") == "user"]
    return _item_text(users[-1]) if users else ""


def estimate_input_tokens(request: dict[str, Any], endpoint: wire.Endpoint) -> int:
    """The input tokens of a run when nobody counted them: characters / 4, rounded up (token
    arrays count their length)."""
    if endpoint == "chat.completions":
        return estimate_prompt_tokens(request.get("messages"))
    if endpoint in ("completions", "embeddings"):
        key = "prompt" if endpoint == "completions" else "input"
        return sum(item.tokens for item in text_inputs(request.get(key)) or [])
    value = request.get("input")
    items = value if isinstance(value, list) else [{"content": value}]
    chars = sum(len(_item_text(item)) for item in items)
    if isinstance(instructions := request.get("instructions"), str):
        chars += len(instructions)
    return math.ceil(chars / CHARS_PER_TOKEN)
