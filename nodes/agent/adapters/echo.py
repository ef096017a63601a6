"""The echo adapter: a deterministic streamed reply with no upstream, for tests and benchmarks.

The reply is ``"echo: "`` + the text of the last user message, split into word tokens (each token
keeps its leading whitespace, so the chunks concatenate back to the reply exactly); a streaming
request gets a chunk per token, a non-streaming one the whole reply in one chunk. Completion
tokens are the chunks emitted; prompt tokens use the shared character estimate.
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
        # A caller that does not stream gets the whole reply as one delta, after the same wait.
        pieces = tokens if request.get("stream") is True else ["".join(tokens)]
        per_piece_s = self._delay_s * len(tokens) / len(pieces) if pieces else 0.0
        for index, piece in enumerate(pieces):
            if per_piece_s:
                await asyncio.sleep(per_piece_s)
            delta = {"role": "assistant", "content": piece} if index == 0 else {"content": piece}
            yield Delta(
                {
                    "id": completion_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": target,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
                }
            )
        yield Done(make_usage(estimate_prompt_tokens(messages), len(tokens)), finish_reason)

    async def probe(self) -> tuple[bool, str]:
        return True, "echo"

    async def aclose(self) -> None:
        return None
