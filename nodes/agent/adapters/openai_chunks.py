"""Relaying choice-shaped answers (chat completions, completions) as the upstream sent them.

A whole answer goes as it came; a stream is relayed chunk by chunk, the upstream's own closing
chunk included (``Done.finish_sent``). Only ``usage`` is taken out of the chunks: the upstream is
always asked for it (metering needs it), the last one it sends goes into ``Done``, and the Edge
writes the one usage chunk its caller asked for.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncGenerator
from typing import Any, TypeGuard

import aiohttp

from nodes import wire
from nodes.agent.adapters.base import (
    CHARS_PER_TOKEN,
    AdapterError,
    AdapterEvent,
    Delta,
    Done,
    make_usage,
    message_text,
)
from nodes.agent.adapters.inputs import estimate_input_tokens
from nodes.agent.adapters.sse import event_payloads, parse_event, read_rest, upstream_object
from nodes.wire.codec import MAX_TOKEN_COUNT


async def read_answer(response: aiohttp.ClientResponse) -> dict[str, Any]:
    """A whole JSON answer: an object that is not an error envelope."""
    return upstream_object(await response.read(), "an answer")


def require_list(answer: dict[str, Any], key: str) -> None:
    if not isinstance(answer.get(key), list):
        raise AdapterError(wire.ERROR_UPSTREAM, f"upstream answered without a {key} list")


def _choice_text(choice: dict[str, Any], part: str) -> str:
    """A choice's text: its ``message``/``delta`` content (chat) or its ``text`` (completions)."""
    if isinstance(text := choice.get("text"), str):
        return text
    body = choice.get(part)
    return message_text(body.get("content")) if isinstance(body, dict) else ""


def completion_done(
    completion: dict[str, Any], request: dict[str, Any], endpoint: wire.Endpoint
) -> Done:
    """The ``Done`` after a whole completion: its usage (or an estimate) and first finish."""
    require_list(completion, "choices")
    choices = completion["choices"]
    first = choices[0] if choices and isinstance(choices[0], dict) else {}
    estimate = math.ceil(len(_choice_text(first, "message")) / CHARS_PER_TOKEN)
    reason = first.get("finish_reason")
    return Done(
        _usage(completion.get("usage"), request, endpoint, estimate),
        reason if isinstance(reason, str) and reason else "stop",
    )


class _Tally:
    """What a relayed stream has said so far: its last usage, and each choice's finish_reason."""

    def __init__(self) -> None:
        self.usage: dict[str, Any] | None = None
        self.finishes: dict[int, str] = {}  # choice index -> its finish_reason, once relayed
        self.indices: set[int] = set()
        self.content_chunks = 0  # for the usage estimate, when the upstream sends none

    def take(self, chunk: dict[str, Any]) -> bool:
        """Lift ``usage`` out of ``chunk`` and note its choices; False if nothing is left to relay.

        Usage is never relayed: the Edge writes one usage chunk, when its caller asks for it
        (LiteLLM sends two; the last one counts).
        """
        if "usage" in chunk:
            reported = chunk.pop("usage")
            if isinstance(reported, dict):
                self.usage = reported
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices:
            return False  # the usage-only chunk, or a keep-alive
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            index = choice.get("index", 0)
            index = index if isinstance(index, int) else 0
            self.indices.add(index)
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                self.finishes.setdefault(index, reason)
            delta = choice.get("delta")
            if _choice_text(choice, "delta") or (
                isinstance(delta, dict) and delta.get("tool_calls")
            ):
                self.content_chunks += 1
        return True

    @property
    def every_choice_finished(self) -> bool:
        return bool(self.finishes) and self.indices <= self.finishes.keys()

    def done(self, request: dict[str, Any], endpoint: wire.Endpoint) -> Done:
        reason = self.finishes.get(0) or next(iter(self.finishes.values()), "stop")
        usage = _usage(self.usage, request, endpoint, self.content_chunks)
        return Done(usage, reason, finish_sent=bool(self.finishes))


async def relay_chunks(
    response: aiohttp.ClientResponse, request: dict[str, Any], endpoint: wire.Endpoint
) -> AsyncGenerator[AdapterEvent, None]:
    tally = _Tally()
    delivered_done = False
    try:
        async with contextlib.aclosing(event_payloads(response)) as payloads:
            async for payload in payloads:
                if payload == "[DONE]":
                    delivered_done = True
                    break
                chunk = parse_event(payload)
                if tally.take(chunk):
                    yield Delta(chunk)
    except aiohttp.ClientPayloadError:
        # The body was cut. Once every choice has its finish_reason nothing is missing (but the
        # usage, then estimated), and aiohttp may raise the cut before handing out a [DONE] it
        # still holds.
        if not tally.every_choice_finished:
            raise
    if delivered_done:
        await read_rest(response)
    elif not tally.finishes:
        raise AdapterError(wire.ERROR_UPSTREAM, "upstream stream ended before completion")
    yield tally.done(request, endpoint)


def _usage(
    reported: Any, request: dict[str, Any], endpoint: wire.Endpoint, completion_estimate: int
) -> wire.Usage:
    """The upstream's usage (its detail objects kept) when it sent one; otherwise an estimate."""
    if isinstance(reported, dict):
        prompt = reported.get("prompt_tokens")
        completion = reported.get("completion_tokens")
        if token_count(prompt) and token_count(completion):
            usage = make_usage(prompt, completion)
            total = reported.get("total_tokens")
            if token_count(total):
                usage["total_tokens"] = total
            if isinstance(details := reported.get("prompt_tokens_details"), dict):
                usage["prompt_tokens_details"] = details
            if isinstance(details := reported.get("completion_tokens_details"), dict):
                usage["completion_tokens_details"] = details
            return usage
    return make_usage(estimate_input_tokens(request, endpoint), completion_estimate)


def token_count(value: Any) -> TypeGuard[int]:
    """A count the wire takes (an int, not a bool, 0 to 2**31 - 1)."""
    return type(value) is int and 0 <= value <= MAX_TOKEN_COUNT
