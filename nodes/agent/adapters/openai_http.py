"""The openai_http adapter: streams from an OpenAI-compatible HTTP server (vLLM, Ollama, ...).

One ``httpx.AsyncClient`` per adapter keeps a connection pool to the upstream. The upstream's SSE
stream is relayed chunk by chunk; ``finish_reason`` and ``usage`` are lifted out of the chunks into
the final ``Done`` (the Edge writes the closing chunk itself), so deltas always carry
``finish_reason: null``.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

from nodes import wire
from nodes.agent.adapters.base import (
    AdapterError,
    AdapterEvent,
    Delta,
    Done,
    estimate_prompt_tokens,
    make_usage,
)
from nodes.agent.spec import AdapterSpec

_ERROR_BODY_LIMIT = 64 * 1024


class OpenAIHTTPAdapter:
    def __init__(self, spec: AdapterSpec, *, environ: Mapping[str, str] = os.environ) -> None:
        assert spec.base_url is not None  # guaranteed by parse_node_config
        self.id = spec.id
        self.probe_interval_s: float | None = spec.health_interval_s
        self._base_url = spec.base_url
        headers = {}
        # The key stays on the Node: the config names the variable, never the value.
        api_key = environ.get(spec.api_key_env) if spec.api_key_env else None
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.AsyncClient(
            base_url=f"{spec.base_url}/",
            headers=headers,
            timeout=httpx.Timeout(spec.timeout_s),
            # Admission is the Edge's job (provider capacity); the pool must not queue runs.
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )

    async def stream(self, request: dict[str, Any], target: str) -> AsyncIterator[AdapterEvent]:
        options = request.get("stream_options")
        body = {
            **request,
            "model": target,
            "stream": True,
            "stream_options": {
                **(options if isinstance(options, dict) else {}),
                "include_usage": True,
            },
        }
        try:
            async with self._client.stream("POST", "chat/completions", json=body) as response:
                if not response.is_success:
                    raise await _upstream_error(response)
                async with contextlib.aclosing(_relay(response, request)) as events:
                    async for event in events:
                        yield event
        except httpx.ConnectError as exc:
            raise AdapterError(
                wire.ERROR_UPSTREAM_UNAVAILABLE, f"cannot reach {self._base_url}: {_describe(exc)}"
            ) from None
        except httpx.TimeoutException as exc:
            raise AdapterError(
                wire.ERROR_UPSTREAM_TIMEOUT, f"upstream timed out: {_describe(exc)}"
            ) from None
        except httpx.TransportError as exc:
            raise AdapterError(
                wire.ERROR_UPSTREAM, f"upstream connection failed: {_describe(exc)}"
            ) from None

    async def probe(self) -> tuple[bool, str]:
        try:
            response = await self._client.get("models")
        except httpx.HTTPError as exc:
            return False, f"GET /models failed: {_describe(exc)}"
        if response.is_success:
            return True, f"GET /models: HTTP {response.status_code}"
        return False, f"GET /models: HTTP {response.status_code}"

    async def aclose(self) -> None:
        await self._client.aclose()


async def _relay(response: httpx.Response, request: dict[str, Any]) -> AsyncIterator[AdapterEvent]:
    finish_reason: str | None = None
    usage: Any = None
    content_chunks = 0
    finished = False
    async with contextlib.aclosing(_sse_data(response.aiter_lines())) as payloads:
        async for payload in payloads:
            if payload == "[DONE]":
                finished = True
                break
            chunk = _parse_chunk(payload)
            if chunk.get("usage"):
                usage = chunk["usage"]
            choices = chunk.get("choices")
            if not choices or not isinstance(choices, list):
                continue  # the usage-only chunk, or a keep-alive
            reasons = [c.get("finish_reason") for c in choices if isinstance(c, dict)]
            if any(reasons):
                finish_reason = next(reason for reason in reasons if reason)
                choices = [
                    {**c, "finish_reason": None}
                    for c in choices
                    if isinstance(c, dict) and _carries_something(c.get("delta"))
                ]
                if not choices:
                    continue
                chunk = {**chunk, "choices": choices}
            delta = choices[0].get("delta") if isinstance(choices[0], dict) else None
            if isinstance(delta, dict) and (delta.get("content") or delta.get("tool_calls")):
                content_chunks += 1
            yield Delta(chunk)
    if not finished and finish_reason is None:
        raise AdapterError(wire.ERROR_UPSTREAM, "upstream stream ended before completion")
    yield Done(_usage(usage, request, content_chunks), finish_reason or "stop")


async def _sse_data(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """The ``data`` of each server-sent event (multi-line data joined; other fields ignored)."""
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
        elif line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


def _carries_something(delta: Any) -> bool:
    """A finishing chunk is relayed only if its delta still says something (often it is empty)."""
    return isinstance(delta, dict) and any(value not in (None, "") for value in delta.values())


def _parse_chunk(payload: str) -> dict[str, Any]:
    try:
        chunk = json.loads(payload)
    except ValueError:
        raise AdapterError(wire.ERROR_UPSTREAM, "upstream sent an event that is not JSON") from None
    if not isinstance(chunk, dict):
        raise AdapterError(wire.ERROR_UPSTREAM, "upstream sent an event that is not an object")
    if chunk.get("error"):
        raise AdapterError(wire.ERROR_UPSTREAM, f"upstream error: {_error_message(chunk)}")
    return chunk


def _usage(reported: Any, request: dict[str, Any], content_chunks: int) -> wire.Usage:
    """The upstream's usage when it sent one; otherwise an estimate (one token per chunk)."""
    if isinstance(reported, dict):
        prompt = reported.get("prompt_tokens")
        completion = reported.get("completion_tokens")
        if type(prompt) is int and type(completion) is int:
            return make_usage(prompt, completion)
    return make_usage(estimate_prompt_tokens(request.get("messages")), content_chunks)


async def _upstream_error(response: httpx.Response) -> AdapterError:
    body = b""
    async for part in response.aiter_bytes():
        body += part
        if len(body) >= _ERROR_BODY_LIMIT:
            break
    try:
        message = _error_message(json.loads(body))
    except ValueError:
        message = body[:500].decode(errors="replace").strip()
    message = message or response.reason_phrase
    return AdapterError(
        wire.ERROR_UPSTREAM,
        f"upstream HTTP {response.status_code}: {message}",
        status=response.status_code,
    )


def _error_message(body: Any) -> str:
    """The message of an OpenAI error envelope ``{"error": {"message": ...}}`` or a near shape."""
    if not isinstance(body, dict):
        return str(body)[:500]
    error = body.get("error", body)
    if isinstance(error, dict):
        for key in ("message", "detail"):
            if error.get(key):
                return str(error[key])
        return json.dumps(error)[:500]
    return str(error)


def _describe(exc: Exception) -> str:
    return str(exc) or type(exc).__name__
