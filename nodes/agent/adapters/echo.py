"""The echo adapter: a deterministic streamed reply with no upstream, for tests and benchmarks.

The reply is ``"echo: "`` + the text of the last user message, split into word tokens (each token
keeps its leading whitespace, so the chunks concatenate back to the reply exactly); a streaming
request gets a chunk per token, a non-streaming one a whole ``chat.completion`` (after the same
wait). Completion tokens are the tokens of the reply; prompt tokens use the shared character
estimate.
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
    requested_max_tokens,
)

_TOKEN = re.compile(r"\s*\S+")


def echo_reply(messages: list[Any]) -> str:
    last_user = next(
        (m for m in reversed(messages) if isinstance(m, dict) and m.get("role") == "user"), None
    )
    text = message_text(last_user.get("content")) if last_user else ""
    return f"echo: {text}"


class EchoAdapter:
    probe_interval_s: float | None = None  # the answer cannot change: probe once

    def __init__(self, spec: wire.AdapterSpec) -> None:
        self.id = spec.id
        self._delay_s = spec.token_delay_ms / 1000

    async def stream(
        self, request: dict[str, Any], target: str
    ) -> AsyncGenerator[AdapterEvent, None]:
        messages = request.get("messages")
        if not isinstance(messages, list):
            raise AdapterError(wire.ERROR_BAD_REQUEST, "request.messages must be a list")
        limit = requested_max_tokens(request)
        tokens = _TOKEN.findall(echo_reply(messages))
        finish_reason = "stop"
        if limit is not None and len(tokens) > limit:
            tokens, finish_reason = tokens[:limit], "length"
        completion_id = f"chatcmpl-echo-{secrets.token_hex(8)}"
        created = int(time.time())
        usage = make_usage(estimate_prompt_tokens(messages), len(tokens))
        if request.get("stream") is not True:
            if self._delay_s:
                await asyncio.sleep(self._delay_s * len(tokens))
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
            if self._delay_s:
                await asyncio.sleep(self._delay_s)
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

    async def probe(self) -> tuple[bool, str]:
        return True, "echo"

    async def aclose(self) -> None:
        return None
