"""Estimated input tokens of an OpenAI request, used only to pick its context class.

A character count, not a tokenizer: the pool needs a cheap, dependency-free number to decide
``normal`` vs ``long`` before the request reaches any model, and every backend tokenizes
differently anyway. About four characters per token is close for English under GPT-style BPE;
code, CJK text and unusual scripts run denser, so the threshold should keep some headroom.

What counts:

- chat ``messages``: each message costs ``TOKENS_PER_MESSAGE`` (role and separators of the chat
  template) plus the characters of its ``content``, ``name`` and of any ``tool_calls`` function
  names and arguments; ``TOKENS_PER_REPLY`` more for the assistant turn the template opens.
- ``content`` as a string, or as a list of parts: a ``{"type": "text", "text": ...}`` part counts
  its characters, any other part (``image_url``, ``input_audio``, ``file``, …) a flat
  ``TOKENS_PER_NON_TEXT_PART`` — OpenAI's price of a low-detail image; the real cost of media
  depends on the backend and cannot be known from the body.
- completions ``prompt`` and embeddings ``input``: a string, a list of strings, or token ids (a
  list of ints, or a list of such lists), which count exactly.
- Responses ``instructions`` (a string) and ``input``: a string, or a list of items, each a
  message whose ``content`` counts as a chat message's does (its ``input_text`` parts as text),
  or another item (a function call's output, …) whose ``output`` and ``arguments`` count.

Shapes it does not recognise count zero: validating the body is the OpenAI layer's job, and the
estimate must never fail a request. Replace the estimator by passing a different number to
``ProviderPool.acquire``; the pool itself never looks at request bodies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4
TOKENS_PER_REPLY = 3
TOKENS_PER_NON_TEXT_PART = 85
TEXT_PARTS = frozenset({"text", "input_text", "output_text"})  # chat's, and the Responses API's


def estimate_input_tokens(body: Mapping[str, Any]) -> int:
    """Estimated input tokens of a chat, completions, embeddings or Responses request body."""
    chars = 0
    tokens = 0
    messages = body.get("messages")
    if isinstance(messages, list):
        tokens += TOKENS_PER_REPLY
        for message in messages:
            if not isinstance(message, Mapping):
                continue
            tokens += TOKENS_PER_MESSAGE
            message_chars, non_text_parts = _content_size(message.get("content"))
            chars += message_chars + _text_len(message.get("name"))
            chars += _tool_calls_len(message.get("tool_calls"))
            tokens += non_text_parts * TOKENS_PER_NON_TEXT_PART
    for key in ("prompt", "input"):
        prompt_chars, prompt_tokens = _prompt_size(body.get(key))
        chars += prompt_chars
        tokens += prompt_tokens
    chars += _text_len(body.get("instructions"))
    return tokens + -(-chars // CHARS_PER_TOKEN)


def _text_len(value: object) -> int:
    return len(value) if isinstance(value, str) else 0


def _content_size(content: object) -> tuple[int, int]:
    """(characters of text, number of non-text parts)."""
    if isinstance(content, str):
        return len(content), 0
    if not isinstance(content, list):
        return 0, 0
    chars = 0
    non_text_parts = 0
    for part in content:
        if isinstance(part, str):
            chars += len(part)
        elif isinstance(part, Mapping):
            if part.get("type") in TEXT_PARTS:
                chars += _text_len(part.get("text"))
            else:
                non_text_parts += 1
    return chars, non_text_parts


def _tool_calls_len(tool_calls: object) -> int:
    if not isinstance(tool_calls, list):
        return 0
    chars = 0
    for call in tool_calls:
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            chars += _text_len(function.get("name")) + _text_len(function.get("arguments"))
    return chars


def _prompt_size(prompt: object) -> tuple[int, int]:
    """(characters of text, exact tokens given as ids)."""
    if isinstance(prompt, str):
        return len(prompt), 0
    if not isinstance(prompt, list):
        return 0, 0
    chars = 0
    tokens = 0
    for item in prompt:
        if isinstance(item, str):
            chars += len(item)
        elif isinstance(item, int):
            tokens += 1
        elif isinstance(item, list):
            tokens += sum(1 for token in item if isinstance(token, int))
        elif isinstance(item, Mapping):  # a Responses API input item
            item_chars, non_text_parts = _content_size(item.get("content"))
            chars += item_chars + _text_len(item.get("output")) + _text_len(item.get("arguments"))
            tokens += TOKENS_PER_MESSAGE + non_text_parts * TOKENS_PER_NON_TEXT_PART
    return chars, tokens


def requested_output_tokens(body: Mapping[str, Any], max_tokens_keys: tuple[str, ...]) -> int:
    """The output tokens the request asks for at most (the first of ``max_tokens_keys`` the
    body sets, e.g. chat's ``max_completion_tokens`` or ``max_tokens``); 0 when it sets none."""
    for key in max_tokens_keys:
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0
