"""What the scripted upstream (``upstream_server``) says, per endpoint, besides chat's own answer.

Each answer object gives the whole JSON (``whole``) and, for those that stream, the SSE bytes of
a stream: ``opening``, ``text_event``, ``body_events`` and ``closing``.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import time
import uuid
from typing import Any

BIG_DELTA_BYTES = 16 * 1024
BIG_EMBEDDING_VALUE = 0.0123456  # each dimension costs about 11 bytes of JSON: "0.0123456, "
DEFAULT_DIMENSIONS = 4


def pieces(text: str) -> list[str]:
    """The deltas a stream sends for ``text``: one per word, spaces kept."""
    return re.findall(r"\S+\s*|\s+", text) or [""]


def reply_deltas(model: str, text: str, body: dict[str, Any]) -> list[str]:
    """The reply's deltas: ``big-<N>`` bytes of text in 16 KiB deltas, else ``echo: <text>``."""
    if model.startswith("big-"):
        size = int(model.removeprefix("big-"))
        big = ("0123456789abcdef" * (size // 16 + 1))[:size]
        return [big[i : i + BIG_DELTA_BYTES] for i in range(0, size, BIG_DELTA_BYTES)]
    if model == "max-tokens-only":
        return pieces(f"max_tokens={body.get('max_tokens')}")
    return pieces(f"echo: {text}")


def words(text: str) -> int:
    return max(1, len(text.split()))


def prompt_text(value: Any) -> str:
    """A completions ``prompt`` (or embeddings ``input``) item as text: token ids joined."""
    if isinstance(value, list):
        return " ".join(str(token) for token in value)
    return value if isinstance(value, str) else ""


def input_items(value: Any) -> list[str]:
    """The texts of an embeddings ``input``: a string, a token array, or a list of either."""
    if isinstance(value, list) and value and not all(type(v) is int for v in value):
        return [prompt_text(item) for item in value]
    return [prompt_text(value)]


def sse_event(payload: dict[str, Any], name: str | None = None) -> bytes:
    head = f"event: {name}\n".encode() if name else b""
    return head + b"data: " + json.dumps(payload).encode() + b"\n\n"


def embeddings(body: dict[str, Any], model: str) -> dict[str, Any]:
    """An embeddings list: per input, ``dimensions`` values from its length and position
    (``big-<N>``: about N bytes of JSON in all); base64 is little-endian float32."""
    texts = input_items(body.get("input"))
    dimensions = int(body.get("dimensions") or DEFAULT_DIMENSIONS)
    if model.startswith("big-"):
        dimensions = max(1, int(model.removeprefix("big-")) // 11 // len(texts))
    data = []
    for index, text in enumerate(texts):
        if model.startswith("big-"):
            vector = [BIG_EMBEDDING_VALUE] * dimensions
        else:
            vector = [round((len(text) + index + 1) / (d + 2), 4) for d in range(dimensions)]
        embedding: Any = vector
        if body.get("encoding_format") == "base64":
            embedding = base64.b64encode(struct.pack(f"<{dimensions}f", *vector)).decode()
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    tokens = sum(words(text) for text in texts)
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def responses_input_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    users = [i for i in value or [] if isinstance(i, dict) and i.get("role") == "user"]
    if not users:
        return ""
    content = users[-1].get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


class ResponsesAnswer:
    """A Responses API answer: the Response object, or its event stream (with ``event:`` lines,
    ``response.in_progress`` included, as OpenAI sends them)."""

    def __init__(self, body: dict[str, Any], model: str) -> None:
        self.body = body
        self.model = model
        self.text_in = responses_input_text(body.get("input"))
        self.deltas = reply_deltas(model, self.text_in, body)
        self.id = f"resp_{uuid.uuid4().hex}"
        self.item_id = f"msg_{uuid.uuid4().hex}"
        self.created_at = int(time.time())
        self.sequence = 0

    def usage(self) -> dict[str, Any]:
        prompt, output = words(self.text_in), len(self.deltas)
        return {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + output,
        }

    def _part(self) -> dict[str, Any]:
        return {"type": "output_text", "text": "".join(self.deltas), "annotations": []}

    def _item(self, done: bool) -> dict[str, Any]:
        return {
            "id": self.item_id,
            "type": "message",
            "status": "completed" if done else "in_progress",
            "role": "assistant",
            "content": [self._part()] if done else [],
        }

    def whole(self, done: bool = True) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": "completed" if done else "in_progress",
            "error": None,
            "incomplete_details": None,
            "model": self.model,
            "output": [self._item(True)] if done else [],
            "parallel_tool_calls": True,
            "previous_response_id": self.body.get("previous_response_id"),
            "tool_choice": "auto",
            "tools": [],
            "usage": self.usage() if done else None,
        }

    def _event(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return sse_event(payload, kind)

    def _at(self) -> dict[str, Any]:
        return {"item_id": self.item_id, "output_index": 0, "content_index": 0}

    def opening(self) -> list[bytes]:
        empty = {"type": "output_text", "text": "", "annotations": []}
        return [
            self._event("response.created", response=self.whole(done=False)),
            self._event("response.in_progress", response=self.whole(done=False)),
            self._event("response.output_item.added", output_index=0, item=self._item(False)),
            self._event("response.content_part.added", part=empty, **self._at()),
        ]

    def text_event(self, text: str) -> bytes:
        return self._event("response.output_text.delta", delta=text, logprobs=[], **self._at())

    def body_events(self) -> list[bytes]:
        return [self.text_event(delta) for delta in self.deltas]

    def error_event(self) -> bytes:
        return self._event("error", code="server_error", message="Scripted stream error.")

    def closing(self, usage_chunks: int, cut: bool) -> list[bytes]:
        text = "".join(self.deltas)
        return [
            self._event("response.output_text.done", text=text, logprobs=[], **self._at()),
            self._event("response.content_part.done", part=self._part(), **self._at()),
            self._event("response.output_item.done", output_index=0, item=self._item(True)),
            self._event("response.completed", response=self.whole()),
        ]
