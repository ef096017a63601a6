"""Echo's Responses API answers: the Response object, and its event sequence when streamed.

The shapes follow OpenAI's: a ``resp_<hex>`` Response holding one assistant ``message`` with one
``output_text`` part; a stream goes ``response.created``, ``response.output_item.added``,
``response.content_part.added``, one ``response.output_text.delta`` per token,
``response.output_text.done``, ``response.content_part.done``, ``response.output_item.done`` and
``response.completed`` (``response.incomplete`` when ``max_output_tokens`` cut the text), each
with its ``sequence_number``.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any


class EchoResponse:
    """One Responses answer of ``tokens``; ``cut`` when ``max_output_tokens`` shortened it."""

    def __init__(
        self, request: dict[str, Any], target: str, tokens: list[str], input_tokens: int, cut: bool
    ) -> None:
        self.request = request
        self.target = target
        self.tokens = tokens
        self.input_tokens = input_tokens
        self.status = "incomplete" if cut else "completed"
        self.id = f"resp_{secrets.token_hex(16)}"
        self.message_id = f"msg_{secrets.token_hex(16)}"
        self.created_at = int(time.time())
        self._sequence = 0

    @property
    def text(self) -> str:
        return "".join(self.tokens)

    def _part(self, text: str) -> dict[str, Any]:
        return {"type": "output_text", "text": text, "annotations": []}

    def _message(self, status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.message_id,
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": content,
        }

    def response(self, *, final: bool = True) -> dict[str, Any]:
        """The Response object: as it ends, or (``final=False``) as it starts, with no output."""
        output = [self._message(self.status, [self._part(self.text)])] if final else []
        usage = {
            "input_tokens": self.input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": len(self.tokens),
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": self.input_tokens + len(self.tokens),
        }
        incomplete = final and self.status == "incomplete"
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": self.status if final else "in_progress",
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": self.request.get("instructions"),
            "max_output_tokens": self.request.get("max_output_tokens"),
            "model": self.target,
            "output": output,
            "parallel_tool_calls": True,
            "previous_response_id": self.request.get("previous_response_id"),
            "temperature": self.request.get("temperature"),
            "tool_choice": "auto",
            "tools": [],
            "top_p": self.request.get("top_p"),
            "metadata": self.request.get("metadata") or {},
            "usage": usage if final else None,
        }

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event

    def opening(self) -> Iterator[dict[str, Any]]:
        yield self._event("response.created", response=self.response(final=False))
        yield self._event(
            "response.output_item.added",
            output_index=0,
            item=self._message("in_progress", []),
        )
        yield self._event("response.content_part.added", part=self._part(""), **self._where())

    def delta(self, token: str) -> dict[str, Any]:
        return self._event("response.output_text.delta", delta=token, logprobs=[], **self._where())

    def closing(self) -> Iterator[dict[str, Any]]:
        text = self.text
        yield self._event("response.output_text.done", text=text, logprobs=[], **self._where())
        yield self._event("response.content_part.done", part=self._part(text), **self._where())
        item = self._message(self.status, [self._part(text)])
        yield self._event("response.output_item.done", output_index=0, item=item)
        yield self._event(f"response.{self.status}", response=self.response())

    def _where(self) -> dict[str, Any]:
        return {"item_id": self.message_id, "output_index": 0, "content_index": 0}
