"""`/v1/chat/completions` and `/v1/completions`: answers made of chunks (`edge.openai_api.flow`).

Both relay the upstream's answer whole, with only its `id` (one per request, whichever provider
answered) and `model` (the caller's name for it) changed; a stream carries one usage chunk when
`stream_options.include_usage` asks for it, and a closing chunk when the upstream sent none. A
stream's chunks come from the Node with them changed already (``relay_as``), as the text the
caller gets: the Edge writes them as they are.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from edge.openai_api.assemble import assemble_choices, assemble_texts
from edge.openai_api.endpoint_requests import (
    COMPLETIONS_MAX_TOKENS_KEYS,
    parse_completions_request,
)
from edge.openai_api.errors import APIError
from edge.openai_api.flow import Call, Endpoint, StreamFormat
from edge.openai_api.requests import MAX_TOKENS_KEYS, OpenAIRequest, parse_chat_request
from edge.openai_api.responses import SSE_DONE, sse_event
from edge.runs import ActiveRun, Chunk, CompletedRun
from nodes import wire

ChoicesOf = Callable[[tuple[dict[str, Any], ...], str | None], list[dict[str, Any]]]


class _ChunkAnswers:
    """One chunk-based endpoint's answers: its object names, ids and closing choice."""

    def __init__(
        self,
        whole_object: str,
        chunk_object: str,
        id_prefix: str,
        closing_choice: Callable[[str | None], dict[str, Any]],
        choices_of: ChoicesOf,
    ) -> None:
        self.whole_object = whole_object
        self.chunk_object = chunk_object
        self.id_prefix = id_prefix
        self.closing_choice = closing_choice
        self.choices_of = choices_of

    def answer_id(self, call: Call) -> str:
        return f"{self.id_prefix}{call.exchange.request_id}"

    def build(self, call: Call, run: CompletedRun) -> dict[str, Any]:
        """The upstream's own answer when the Node relayed it whole; else put together from
        the chunks the run streamed."""
        model = call.request.model
        if run.response is not None:
            return {**run.response, "id": self.answer_id(call), "model": model}
        return {
            "id": self.answer_id(call),
            "object": self.whole_object,
            "created": int(time.time()),
            "model": model,
            "choices": self.choices_of(run.chunks, run.finish_reason),
        }

    def relay_as(self, call: Call) -> wire.RelayAs:
        return {"id": self.answer_id(call), "model": call.request.model}

    def encode(self, call: Call, run: ActiveRun, batch: list[Chunk]) -> bytes:
        answer_id, model = self.answer_id(call), call.request.model
        events = []
        for chunk in batch:
            if isinstance(chunk, str):
                # Written by the Node as the caller gets it. A lone surrogate, which only a
                # faulty Node sends, becomes "?": the stream stays UTF-8.
                events.append(b"data: " + chunk.encode(errors="replace") + b"\n\n")
                continue
            # From a Node older than relay_as: as the upstream sent it.
            chunk["id"], chunk["model"] = answer_id, model
            chunk.pop("usage", None)  # the caller gets one usage chunk, the Edge's
            events.append(sse_event(chunk))
        return b"".join(events)

    def tail(self, call: Call, run: ActiveRun, counts: dict[str, Any]) -> bytes:
        tail = b""
        if not run.finish_sent:
            # The adapter relayed no closing chunk of its own (echo, or llama.cpp's bare [DONE]).
            tail += sse_event(self._chunk(call, [self.closing_choice(run.finish_reason)]))
        if call.request.include_usage:
            tail += sse_event({**self._chunk(call, []), "usage": counts})
        return tail + SSE_DONE

    def _chunk(self, call: Call, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.answer_id(call),
            "object": self.chunk_object,
            "created": int(time.time()),
            "model": call.request.model,
            "choices": choices,
        }

    def endpoint(
        self,
        name: wire.Endpoint,
        path: str,
        parse: Callable[[dict[str, Any]], OpenAIRequest],
        max_tokens_keys: tuple[str, ...],
    ) -> Endpoint:
        return Endpoint(
            name=name,
            path=path,
            parse=parse,
            max_tokens_keys=max_tokens_keys,
            build=self.build,
            stream=StreamFormat(self.encode, _error_event, self.tail, self.relay_as),
        )


def _error_event(error: APIError) -> bytes:
    return sse_event(error.envelope())


CHAT = _ChunkAnswers(
    "chat.completion",
    "chat.completion.chunk",
    "chatcmpl-",
    lambda finish_reason: {"index": 0, "delta": {}, "finish_reason": finish_reason},
    assemble_choices,
).endpoint("chat.completions", "/v1/chat/completions", parse_chat_request, MAX_TOKENS_KEYS)

COMPLETIONS = _ChunkAnswers(
    "text_completion",
    "text_completion",
    "cmpl-",
    lambda finish_reason: {
        "index": 0,
        "text": "",
        "logprobs": None,
        "finish_reason": finish_reason,
    },
    assemble_texts,
).endpoint("completions", "/v1/completions", parse_completions_request, COMPLETIONS_MAX_TOKENS_KEYS)
