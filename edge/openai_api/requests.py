"""Reading an OpenAI request body: every problem is a 400 naming the field.

Chat completions here; the other endpoints' bodies in ``edge.openai_api.endpoint_requests``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from edge.config.schema import Generation
from edge.openai_api.errors import APIError, invalid
from nodes.wire import json_text

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
MAX_N = 128  # choices per request, as OpenAI allows
# The names a caller may give its output-token limit; OpenAI's current one first.
MAX_TOKENS_KEYS = ("max_completion_tokens", "max_tokens")
# Arrays and objects within each other. Far more than a chat request needs, and far less than
# Python's recursion limit, which every later step that walks the body (encoding it for the
# wire, estimating its tokens) would otherwise hit, some before json.loads does.
MAX_JSON_DEPTH = 64
_TOO_DEEP = f"The request body is nested more than {MAX_JSON_DEPTH} levels deep."


@dataclass(frozen=True, slots=True)
class OpenAIRequest:
    """A checked request body: what the Edge reads of it; ``body`` goes on as sent."""

    model: str
    body: dict[str, Any]
    stream: bool
    include_usage: bool
    # The Responses API's `previous_response_id`, when the request continues a conversation.
    previous_response_id: str | None = None


def parse_json_body(raw: bytes) -> dict[str, Any]:
    if _nested_too_deeply(raw):
        raise invalid(_TOO_DEEP)
    try:
        body = json_text.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise invalid("The request body is not valid JSON.") from None
    except RecursionError:  # deep nesting the count above missed (the body is not UTF-8 JSON)
        raise invalid(_TOO_DEEP) from None
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.")
    return body


_NOT_STRUCTURE = bytes(range(256)).translate(None, b'[]{}"')
_STEP = tuple(1 if byte in b"[{" else -1 if byte in b"]}" else 0 for byte in range(256))


def _nested_too_deeply(raw: bytes) -> bool:
    """Whether the body's arrays and objects go past the limit, read off its bytes unparsed.

    Most bodies have fewer brackets than the limit and are not looked at further; otherwise the
    count runs in C (string contents dropped, then the running sum of opens and closes), so even
    a body at the size limit takes a fraction of what parsing it does.
    """
    if raw.count(b"[") + raw.count(b"{") <= MAX_JSON_DEPTH:
        return False
    # Escapes go first, so every quote left opens or closes a string; then strings' contents.
    structure = raw.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
    structure = b"".join(structure.split(b'"')[::2])
    return max(accumulate(map(_STEP.__getitem__, structure)), default=0) > MAX_JSON_DEPTH


def parse_chat_request(body: dict[str, Any]) -> OpenAIRequest:
    return parse_generating_request(
        body, lambda checked: _check_messages(checked.get("messages")), MAX_TOKENS_KEYS
    )


def parse_generating_request(
    body: dict[str, Any],
    check_input: Callable[[dict[str, Any]], None],
    max_tokens_keys: tuple[str, ...],
) -> OpenAIRequest:
    """A chat or completions body: model, input (``check_input``), stream, `n`, token limits."""
    model = model_of(body)
    check_input(body)
    stream = stream_of(body)
    include_usage = include_usage_of(body, stream)
    check_n(body)
    check_positive_ints(body, max_tokens_keys)
    return OpenAIRequest(model, body, stream, include_usage)


def check_n(body: dict[str, Any]) -> None:
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_N):
        raise invalid(f"'n' must be an integer from 1 to {MAX_N}.", "n")


def model_of(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("'model' is required and must be a non-empty string.", "model")
    if not _encodable(model):
        raise invalid("'model' must be valid Unicode (it holds a lone surrogate).", "model")
    return model


def stream_of(body: dict[str, Any]) -> bool:
    stream = body.get("stream", False)
    if stream is None:
        return False
    if not isinstance(stream, bool):
        raise invalid("'stream' must be a boolean.", "stream")
    return stream


def include_usage_of(body: dict[str, Any], stream: bool) -> bool:
    """Whether a stream's caller asked for the usage chunk (`stream_options.include_usage`)."""
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise invalid("'stream_options' must be an object.", "stream_options")
    return bool(stream and options and options.get("include_usage"))


def check_positive_ints(body: dict[str, Any], keys: tuple[str, ...]) -> None:
    for key in keys:
        value = body.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise invalid(f"'{key}' must be a positive integer.", key)


def _encodable(text: str) -> bool:
    """No lone surrogate (JSON's `"\\ud800"`): such a string cannot be stored or logged as UTF-8.

    Only `model` is checked: it is metered and quoted back; the rest of the body goes to the
    upstream as JSON, which escapes a lone surrogate.
    """
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise invalid("'messages' is required and must be a non-empty array.", "messages")
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise invalid(f"'{where}' must be an object.", where)
        role = message.get("role")
        if role not in _ROLES:
            raise invalid(
                f"'{where}.role' must be one of {', '.join(sorted(_ROLES))}.", f"{where}.role"
            )
        content = message.get("content")
        if content is None and role in ("assistant", "function"):
            continue
        if not isinstance(content, (str, list)):
            raise invalid(f"'{where}.content' must be a string or an array.", f"{where}.content")
        if isinstance(content, list):
            for part_index, part in enumerate(content):
                if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                    path = f"{where}.content[{part_index}]"
                    raise invalid(f"'{path}' must be an object with a 'type'.", path)


def apply_generation_policy(
    body: dict[str, Any], generation: Generation, keys: tuple[str, ...] = MAX_TOKENS_KEYS
) -> dict[str, Any]:
    """Fill in the model's default output-token limit; refuse a request above the model's limit.

    ``keys``: the names the endpoint knows for it, the one the default is sent as last (chat's
    two, completions' `max_tokens`, the Responses API's `max_output_tokens`). The limit holds
    for whichever of them the caller sent (null counts as not sent), so no spelling gets past
    it. Refused rather than clamped: a silently shortened answer looks like a model problem.
    """
    limit = generation.max_tokens_limit
    sent = [(key, body[key]) for key in keys if body.get(key) is not None]
    for key, requested in sent:
        if limit is not None and requested > limit:
            raise APIError(
                400,
                f"'{key}' is {requested}, above this model's limit of {limit}.",
                code="max_tokens_exceeded",
                param=key,
            )
    if not sent and generation.default_max_tokens is not None:
        return {**body, keys[-1]: generation.default_max_tokens}
    return body
