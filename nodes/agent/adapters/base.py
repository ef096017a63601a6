"""What every adapter speaks: the events it yields, its error, and shared token estimates."""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any, Protocol

from nodes import wire

# Characters per token for estimates: the usual rule of thumb for English text with BPE
# tokenizers. Used for prompt counts the upstream does not report and for the echo adapter.
CHARS_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class Delta:
    """One streamed event as the upstream sent it: a ``chat.completion.chunk`` or
    ``text_completion`` chunk less its ``usage``, or a Responses API event as is."""

    chunk: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Response:
    """A whole non-streamed answer as the upstream sent it: a ``chat.completion``,
    ``text_completion``, embeddings ``list`` or ``response``."""

    completion: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Done:
    usage: wire.Usage
    finish_reason: str
    # A relayed chunk already carried the finish_reason (the upstream's own closing chunk).
    finish_sent: bool = False


AdapterEvent = Delta | Response | Done


class AdapterError(wire.RunError):
    """A run failed in an adapter: its upstream or the Node itself (see ``wire.RunError``)."""


class Adapter(Protocol):
    id: str
    # Seconds between health probes; None probes once (the answer cannot change).
    probe_interval_s: float | None

    def stream(
        self, request: dict[str, Any], target: str, endpoint: wire.Endpoint
    ) -> AsyncGenerator[AdapterEvent, None]:
        """Answer ``request``, a body for ``endpoint``: yield ``Delta``s or one ``Response``,
        then one ``Done``; or raise ``AdapterError``.

        Cancelling the consuming task must release upstream resources (close the response).
        """
        ...

    async def probe(self) -> tuple[bool, str]:
        """(healthy, detail); never raises."""
        ...

    async def aclose(self) -> None: ...


def message_text(content: Any) -> str:
    """The text of a message ``content``: a string, or the text parts of a parts list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def estimate_prompt_tokens(messages: Any) -> int:
    if not isinstance(messages, list):
        return 0
    chars = sum(len(message_text(m.get("content"))) for m in messages if isinstance(m, dict))
    return math.ceil(chars / CHARS_PER_TOKEN)


def make_usage(prompt_tokens: int, completion_tokens: int) -> wire.Usage:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def positive_int(request: dict[str, Any], key: str) -> int | None:
    """``request[key]`` when a positive integer; None when absent or null; else ``bad_request``."""
    value = request.get(key)
    if value is None:
        return None
    if type(value) is not int or value < 1:
        raise AdapterError(wire.ERROR_BAD_REQUEST, f"{key} must be a positive integer")
    return value


def requested_max_tokens(request: dict[str, Any]) -> int | None:
    """``max_completion_tokens`` (current OpenAI name) or ``max_tokens``; None when unset.

    A null counts as unset, so ``{"max_completion_tokens": null, "max_tokens": 5}`` is 5.
    """
    key = "max_tokens" if request.get("max_completion_tokens") is None else "max_completion_tokens"
    return positive_int(request, key)
