"""One chat completion message from a run's streamed chunks (a non-streaming reply)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from edge.runs import RunFailed

BAD_NODE_RESPONSE = "bad_node_response"


def assemble_message(chunks: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Join the first choice's deltas: content in order, tool calls merged by their index.

    Raises RunFailed for a chunk that is not an OpenAI chat.completion.chunk.
    """
    parts: list[str] = []
    tool_calls: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            raise _malformed("choices is not a list")
        for choice in choices:
            if not isinstance(choice, dict) or not isinstance(choice.get("delta", {}), dict):
                raise _malformed("a choice is not an object with a delta object")
            if choice.get("index", 0) != 0:
                continue  # n=1 only: other choices are not asked for
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if content is not None and not isinstance(content, str):
                raise _malformed("delta.content is not a string")
            if content:
                parts.append(content)
            for call in delta.get("tool_calls") or ():
                _merge_tool_call(tool_calls, call)
    message: dict[str, Any] = {"role": "assistant", "content": "".join(parts)}
    if tool_calls:
        message["tool_calls"] = [tool_calls[index] for index in sorted(tool_calls)]
        message["content"] = message["content"] or None
    return message


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
