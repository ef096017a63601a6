"""The echo adapter: deterministic answers with no upstream, for tests and benchmarks.

Chat replies ``"echo: "`` + the text of the last user message, completions ``"echo: "`` + each
prompt, Responses the input's last user text; each reply is split into word tokens (each token
keeps its leading whitespace, so the chunks concatenate back to the reply exactly). A streaming
request gets an event per token, a non-streaming one the whole answer (after the same wait).
Embeddings are vectors derived from each input's sha256 (``echo_embeddings``). Output tokens are
the tokens of the reply; input tokens use the shared character estimate.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from collections.abc import AsyncGenerator
from typing import Any

from nodes import wire
from nodes.agent.adapters.base import (
    AdapterError,
    AdapterEvent,
    Delta,
    Done,
    Response,
    estimate_prompt_tokens,
    make_usage,
    message_text,
    positive_int,
    requested_max_tokens,
)
from nodes.agent.adapters.echo_embeddings import embeddings_answer
from nodes.agent.adapters.echo_responses import EchoResponse
from nodes.agent.adapters.inputs import estimate_input_tokens, response_input_text, text_inputs

_TOKEN = re.compile(r"\s*\S+")


def echo_reply(messages: list[Any]) -> str:
    last_user = next(
        (m for m in reversed(messages) if isinstance(m, dict) and m.get("role") == "user"), None
    )
    text = message_text(last_user.get("content")) if last_user else ""
    return f"echo: {text}"


def _tokens(text: str, limit: int | None) -> tuple[list[str], str]:
    """The reply's tokens, cut to ``limit``, and the finish reason that says whether it was."""
    tokens = _TOKEN.findall(text)
    if limit is not None and len(tokens) > limit:
        return tokens[:limit], "length"
    return tokens, "stop"


class EchoAdapter:
    probe_interval_s: float | None = None  # the answer cannot change: probe once

    def __init__(self, spec: wire.AdapterSpec) -> None:
        self.id = spec.id
        self._delay_s = spec.token_delay_ms / 1000

    def stream(
        self,
        request: dict[str, Any],
        target: str,
        endpoint: wire.Endpoint = wire.DEFAULT_ENDPOINT,
    ) -> AsyncGenerator[AdapterEvent, None]:
        if endpoint == "completions":
            return self._completions(request, target)
        if endpoint == "embeddings":
            return self._embeddings(request, target)
        if endpoint == "responses":
            return self._responses(request, target)
        return self._chat(request, target)

    async def _pause(self, tokens: int) -> None:
        if self._delay_s:
            await asyncio.sleep(self._delay_s * tokens)

    async def _chat(
        self, request: dict[str, Any], target: str
    ) -> AsyncGenerator[AdapterEvent, None]:
        messages = request.get("messages")
        if not isinstance(messages, list):
            raise AdapterError(wire.ERROR_BAD_REQUEST, "request.messages must be a list")
        tokens, finish_reason = _tokens(echo_reply(messages), requested_max_tokens(request))
        completion_id = f"chatcmpl-echo-{secrets.token_hex(8)}"
        created = int(time.time())
        usage = make_usage(estimate_prompt_tokens(messages), len(tokens))
        if request.get("stream") is not True:
            await self._pause(len(tokens))
            message = {"role": "assistant", "content": "".join(tokens)}
            choice = {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason,
            }
            yield Response(
                {
                    "id": completion_id,
                    "object": "chat.completion",
                    "created": created,
                    "model": target,
                    "choices": [choice],
                    "usage": usage,
                }
            )
            yield Done(usage, finish_reason)
            return
        for index, token in enumerate(tokens):
            await self._pause(1)
            delta = {"role": "assistant", "content": token} if index == 0 else {"content": token}
            yield Delta(
                {
                    "id": completion_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": target,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
                }
            )
        yield Done(usage, finish_reason)

    async def _completions(
        self, request: dict[str, Any], target: str
    ) -> AsyncGenerator[AdapterEvent, None]:
        prompts = text_inputs(request.get("prompt"))
        if prompts is None:
            raise AdapterError(
                wire.ERROR_BAD_REQUEST,
                "prompt must be a string, a token array, or a non-empty list of either",
            )
        limit = positive_int(request, "max_tokens")
        replies = [_tokens(f"echo: {prompt.text}", limit) for prompt in prompts]
        envelope = {
            "id": f"cmpl-echo-{secrets.token_hex(8)}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": target,
        }
        output = sum(len(tokens) for tokens, _ in replies)
        usage = make_usage(sum(prompt.tokens for prompt in prompts), output)
        finish_reason = replies[0][1]
        if request.get("stream") is not True:
            await self._pause(output)
            choices = [
                {"text": "".join(tokens), "index": i, "logprobs": None, "finish_reason": reason}
                for i, (tokens, reason) in enumerate(replies)
            ]
            yield Response({**envelope, "choices": choices, "usage": usage})
            yield Done(usage, finish_reason)
            return
        for index, (tokens, _) in enumerate(replies):
            for token in tokens:
                await self._pause(1)
                choice = {"text": token, "index": index, "logprobs": None, "finish_reason": None}
                yield Delta({**envelope, "choices": [choice]})
        yield Done(usage, finish_reason)

    async def _embeddings(
        self, request: dict[str, Any], target: str
    ) -> AsyncGenerator[AdapterEvent, None]:
        answer, tokens = embeddings_answer(request, target)
        await self._pause(1)
        yield Response(answer)
        yield Done(make_usage(tokens, 0), "stop")

    async def _responses(
        self, request: dict[str, Any], target: str
    ) -> AsyncGenerator[AdapterEvent, None]:
        text = response_input_text(request.get("input"))
        if text is None:
            raise AdapterError(wire.ERROR_BAD_REQUEST, "input must be a string or a list of items")
        tokens, finish = _tokens(f"echo: {text}", positive_int(request, "max_output_tokens"))
        answer = EchoResponse(
            request, target, tokens, estimate_input_tokens(request, "responses"), finish != "stop"
        )
        usage = make_usage(answer.input_tokens, len(tokens))
        if request.get("stream") is not True:
            await self._pause(len(tokens))
            yield Response(answer.response())
            yield Done(usage, answer.status)
            return
        for event in answer.opening():
            yield Delta(event)
        for token in tokens:
            await self._pause(1)
            yield Delta(answer.delta(token))
        for event in answer.closing():
            yield Delta(event)
        yield Done(usage, answer.status, finish_sent=True)

    async def probe(self) -> tuple[bool, str]:
        return True, "echo"

    async def aclose(self) -> None:
        return None
