"""Relaying Responses API answers and embeddings, as the upstream sent them.

A Responses stream is relayed event by event, each event's JSON as is (its ``type`` says what it
is); its terminal event (``response.completed``, ``.incomplete`` or ``.failed``) gives ``Done``
the usage (``input_tokens``, ``output_tokens``) and the finish (the Response's ``status``). An
``error`` event fails the run. Embeddings come back whole; ``Done`` carries their input tokens.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncGenerator
from typing import Any

import aiohttp

from nodes import wire
from nodes.agent.adapters.base import CHARS_PER_TOKEN, AdapterError, AdapterEvent, Delta, Done
from nodes.agent.adapters.inputs import estimate_input_tokens
from nodes.agent.adapters.openai_chunks import require_list, token_count
from nodes.agent.adapters.sse import event_payloads, parse_event, read_rest
from nodes.agent.adapters.upstream_errors import error_code

TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


def _usage(reported: Any, request: dict[str, Any], output_estimate: int) -> wire.Usage:
    """A Response's usage in the wire's terms (its detail objects kept); else an estimate."""
    if isinstance(reported, dict):
        prompt = reported.get("input_tokens")
        completion = reported.get("output_tokens")
        if token_count(prompt) and token_count(completion):
            total = reported.get("total_tokens")
            usage: wire.Usage = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": total if token_count(total) else prompt + completion,
            }
            if isinstance(details := reported.get("input_tokens_details"), dict):
                usage["prompt_tokens_details"] = details
            if isinstance(details := reported.get("output_tokens_details"), dict):
                usage["completion_tokens_details"] = details
            return usage
    prompt = estimate_input_tokens(request, "responses")
    return {
        "prompt_tokens": prompt,
        "completion_tokens": output_estimate,
        "total_tokens": prompt + output_estimate,
    }


def _status(response: dict[str, Any]) -> str:
    status = response.get("status")
    return status if isinstance(status, str) and status else "completed"


def _output_text(response: dict[str, Any]) -> str:
    return "".join(
        part.get("text", "")
        for item in response.get("output") or []
        if isinstance(item, dict)
        for part in item.get("content") or []
        if isinstance(part, dict) and isinstance(part.get("text"), str)
    )


def response_done(response: dict[str, Any], request: dict[str, Any]) -> Done:
    """The ``Done`` after a whole Response object."""
    require_list(response, "output")
    estimate = math.ceil(len(_output_text(response)) / CHARS_PER_TOKEN)
    return Done(_usage(response.get("usage"), request, estimate), _status(response))


def embeddings_done(answer: dict[str, Any], request: dict[str, Any]) -> Done:
    """The ``Done`` after an embeddings list: its input tokens, no output."""
    require_list(answer, "data")
    usage = answer.get("usage")
    prompt = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if not token_count(prompt):
        prompt = estimate_input_tokens(request, "embeddings")
    return Done({"prompt_tokens": prompt, "completion_tokens": 0, "total_tokens": prompt}, "stop")


async def relay_responses(
    response: aiohttp.ClientResponse, request: dict[str, Any]
) -> AsyncGenerator[AdapterEvent, None]:
    final: dict[str, Any] | None = None
    text_deltas = 0
    try:
        async with contextlib.aclosing(event_payloads(response)) as payloads:
            async for payload in payloads:
                if payload == "[DONE]":  # not OpenAI's, but some servers end so
                    break
                event = parse_event(payload)
                kind = event.get("type")
                if kind == "error":
                    raise AdapterError(
                        wire.ERROR_UPSTREAM,
                        f"upstream error: {event.get('message') or 'error event'}",
                        upstream_code=error_code({"error": event}),
                    )
                if kind == "response.output_text.delta":
                    text_deltas += 1
                yield Delta(event)
                if kind in TERMINAL_EVENTS and isinstance(event.get("response"), dict):
                    final = event["response"]
                    break
    except aiohttp.ClientPayloadError:
        if final is None:  # cut after the terminal event: nothing is missing
            raise
    if final is None:
        raise AdapterError(wire.ERROR_UPSTREAM, "upstream stream ended before completion")
    await read_rest(response)
    usage = _usage(final.get("usage"), request, text_deltas)
    yield Done(usage, _status(final), finish_sent=True)
