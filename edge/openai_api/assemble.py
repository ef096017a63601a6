"""The choices of a completion from a run's streamed chunks (a reply that did not stream).

Used when a run answered a non-streaming request with chunks instead of a whole completion: the
echo adapter does not, but an upstream may stream whatever it was asked.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from edge.runs import RunFailed

BAD_NODE_RESPONSE = "bad_node_response"


class _Choice:
    """One choice being put together from its deltas."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.message: dict[str, Any] = {"role": "assistant"}
        self.texts: dict[str, list[str]] = {}
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.logprobs: dict[str, list[Any]] | None = None
        self.finish_reason: str | None = None

    def add(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta") or {}
        for key, value in delta.items():
            if key == "tool_calls":
                for call in value or ():
                    _merge_tool_call(self.tool_calls, call)
            elif isinstance(value, str) and key != "role":
                # content, and the fields servers add beside it (reasoning_content, refusal, ...)
                self.texts.setdefault(key, []).append(value)
            elif key == "content" and value is not None:
                raise _malformed("delta.content is not a string")
            elif value is not None or key not in self.message:
                self.message[key] = value
        logprobs = choice.get("logprobs")
        if isinstance(logprobs, dict):
            joined = self.logprobs = self.logprobs or {}
            for key, items in logprobs.items():
                if isinstance(items, list):
                    joined.setdefault(key, []).extend(items)
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]

    def build(self, finish_reason: str | None) -> dict[str, Any]:
        message = {**self.message, **{key: "".join(parts) for key, parts in self.texts.items()}}
        message.setdefault("content", "")
        if self.tool_calls:
            message["tool_calls"] = [self.tool_calls[index] for index in sorted(self.tool_calls)]
            message["content"] = message["content"] or None
        return {
            "index": self.index,
            "message": message,
            "logprobs": self.logprobs,
            "finish_reason": self.finish_reason or finish_reason,
        }


def assemble_choices(
    chunks: Iterable[dict[str, Any]], finish_reason: str | None
) -> list[dict[str, Any]]:
    """Join each choice's deltas: text fields in order, tool calls merged by their index,
    logprobs concatenated; a choice's own finish_reason, else the run's.

    Raises RunFailed for a chunk that is not an OpenAI chat.completion.chunk.
    """
    choices: dict[int, _Choice] = {0: _Choice(0)}
    for chunk in chunks:
        raw_choices = chunk.get("choices")
        if not isinstance(raw_choices, list):
            raise _malformed("choices is not a list")
        for raw in raw_choices:
            if not isinstance(raw, dict) or not isinstance(raw.get("delta", {}), dict):
                raise _malformed("a choice is not an object with a delta object")
            index = raw.get("index", 0)
            if not isinstance(index, int) or isinstance(index, bool):
                raise _malformed("a choice index is not an integer")
            choices.setdefault(index, _Choice(index)).add(raw)
    return [choices[index].build(finish_reason) for index in sorted(choices)]


def assemble_texts(
    chunks: Iterable[dict[str, Any]], finish_reason: str | None
) -> list[dict[str, Any]]:
    """The choices of a text_completion from its chunks: each choice's texts joined in order.

    Raises RunFailed for a chunk that is not an OpenAI text_completion chunk.
    """
    texts: dict[int, list[str]] = {0: []}
    finish: dict[int, str] = {}
    for chunk in chunks:
        raw_choices = chunk.get("choices")
        if not isinstance(raw_choices, list):
            raise _malformed("choices is not a list")
        for raw in raw_choices:
            index = raw.get("index", 0) if isinstance(raw, dict) else None
            if not isinstance(index, int) or isinstance(index, bool):
                raise _malformed("a choice is not an object with an integer index")
            text = raw.get("text") or ""
            if not isinstance(text, str):
                raise _malformed("a choice's text is not a string")
            texts.setdefault(index, []).append(text)
            if raw.get("finish_reason"):
                finish[index] = raw["finish_reason"]
    return [
        {
            "index": index,
            "text": "".join(texts[index]),
            "logprobs": None,
            "finish_reason": finish.get(index, finish_reason),
        }
        for index in sorted(texts)
    ]


def _merge_tool_call(calls: dict[int, dict[str, Any]], call: Any) -> None:
    """Tool calls stream as fragments: the first names the call, the rest extend its arguments."""
    if not isinstance(call, dict) or not isinstance(call.get("index", 0), int):
        raise _malformed("a tool call fragment is not an object with an integer index")
    function = call.get("function") or {}
    if not isinstance(function, dict):
        raise _malformed("tool_calls[].function is not an object")
    merged = calls.setdefault(
        call.get("index", 0),
        {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
    )
    if call.get("id"):
        merged["id"] = str(call["id"])
    if call.get("type"):
        merged["type"] = str(call["type"])
    for key in ("name", "arguments"):
        if function.get(key):
            merged["function"][key] += str(function[key])


def _malformed(what: str) -> RunFailed:
    return RunFailed(BAD_NODE_RESPONSE, f"the Node sent a malformed chunk: {what}")
