"""Reading completions, embeddings and Responses API bodies: every problem a 400 naming the field.

Only what the Edge itself needs is checked (the model, whether it streams, the output-token
limit, what its input is made of for the long-context estimate); the rest goes to the upstream
as sent, which knows its own options best.
"""

from __future__ import annotations

from typing import Any

from edge.openai_api.errors import invalid
from edge.openai_api.requests import (
    OpenAIRequest,
    check_positive_ints,
    model_of,
    parse_generating_request,
    stream_of,
)

COMPLETIONS_MAX_TOKENS_KEYS = ("max_tokens",)
RESPONSES_MAX_TOKENS_KEYS = ("max_output_tokens",)


def parse_completions_request(body: dict[str, Any]) -> OpenAIRequest:
    return parse_generating_request(
        body, lambda checked: _check_text_input(checked, "prompt"), COMPLETIONS_MAX_TOKENS_KEYS
    )


def parse_embeddings_request(body: dict[str, Any]) -> OpenAIRequest:
    model = model_of(body)
    _check_text_input(body, "input")
    if body.get("stream"):
        raise invalid("Embeddings are not streamed; leave out 'stream'.", "stream")
    check_positive_ints(body, ("dimensions",))
    return OpenAIRequest(model, body, stream=False, include_usage=False)


def parse_responses_request(body: dict[str, Any]) -> OpenAIRequest:
    model = model_of(body)
    given = body.get("input")
    if given is not None and not isinstance(given, (str, list)):
        raise invalid("'input' must be a string or an array of input items.", "input")
    if isinstance(given, list):
        for index, item in enumerate(given):
            if not isinstance(item, dict):
                raise invalid(f"'input[{index}]' must be an object.", f"input[{index}]")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise invalid("'instructions' must be a string.", "instructions")
    previous = body.get("previous_response_id")
    if previous is not None and (not isinstance(previous, str) or not previous):
        raise invalid("'previous_response_id' must be a non-empty string.", "previous_response_id")
    stream = stream_of(body)
    check_positive_ints(body, RESPONSES_MAX_TOKENS_KEYS)
    return OpenAIRequest(model, body, stream, include_usage=False, previous_response_id=previous)


def _check_text_input(body: dict[str, Any], key: str) -> None:
    """``key`` is a string, a non-empty array of strings, token ids, or arrays of token ids."""
    value = body.get(key)
    if isinstance(value, str):
        return
    message = f"'{key}' is required: a string, an array of strings, or token ids."
    if not isinstance(value, list) or not value:
        raise invalid(message, key)
    if all(isinstance(item, str) for item in value) or all(_is_token(item) for item in value):
        return
    if all(isinstance(item, list) and item and all(map(_is_token, item)) for item in value):
        return
    raise invalid(message, key)


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
