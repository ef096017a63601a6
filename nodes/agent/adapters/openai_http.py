"""The openai_http adapter: calls an OpenAI-compatible HTTP server (vLLM, Ollama, ...).

One aiohttp session per adapter keeps a keep-alive connection pool to the upstream (aiohttp, not
httpx: measured about ten times the request rate per core here, see docs/benchmarks.md). A
streaming request is relayed chunk by chunk from the upstream's SSE stream; ``finish_reason`` and
``usage`` are lifted out of the chunks into the final ``Done`` (the Edge writes the closing chunk
itself), so deltas always carry ``finish_reason: null``. A non-streaming request is sent
non-streaming and comes back as one delta.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

import aiohttp

from nodes import wire
from nodes.agent.adapters.base import (
    AdapterError,
    AdapterEvent,
    Delta,
    Done,
    estimate_prompt_tokens,
    make_usage,
)

_ERROR_BODY_LIMIT = 64 * 1024


class OpenAIHTTPAdapter:
    def __init__(self, spec: wire.AdapterSpec, *, environ: Mapping[str, str] = os.environ) -> None:
        assert spec.base_url is not None  # guaranteed by parse_node_config
        self.id = spec.id
        self.probe_interval_s: float | None = spec.health_interval_s
        self._base_url = spec.base_url
        self._headers = {}
        # The key stays on the Node: the config names the variable, never the value.
        api_key = environ.get(spec.api_key_env) if spec.api_key_env else None
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        # Per operation: connecting, and silence while reading; the run's deadline bounds the rest.
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=spec.timeout_s, sock_read=spec.timeout_s
        )
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        # Made on first use, inside the running loop that will own its connections.
        if self._session is None:
            self._session = aiohttp.ClientSession(
                headers=self._headers,
                timeout=self._timeout,
                # Admission is the Edge's job (provider capacity); the pool must not queue runs.
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30),
            )
        return self._session

    async def stream(
        self, request: dict[str, Any], target: str
    ) -> AsyncGenerator[AdapterEvent, None]:
        streaming = request.get("stream") is True
        body = {**request, "model": target, "stream": streaming}
        if streaming:
            options = request.get("stream_options")
            body["stream_options"] = {
                **(options if isinstance(options, dict) else {}),
                "include_usage": True,
            }
        else:
            body.pop("stream_options", None)
        url = f"{self._base_url}/chat/completions"
        try:
            async with self._client().post(url, json=body) as response:
                try:
                    if response.status >= 300:
                        raise await _upstream_error(response)
                    # Some servers stream whatever was asked: follow what came back.
                    if streaming or response.content_type == "text/event-stream":
                        async with contextlib.aclosing(_relay(response, request)) as events:
                            async for event in events:
                                yield event
                    else:
                        for event in _single(await _read_json(response), request):
                            yield event
                except BaseException:
                    # Cancelled or failed mid-body: close the connection, the upstream sees it.
                    response.close()
                    raise
        except aiohttp.ClientConnectorError as exc:
            raise AdapterError(
                wire.ERROR_UPSTREAM_UNAVAILABLE, f"cannot reach {self._base_url}: {_describe(exc)}"
            ) from None
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise AdapterError(
                wire.ERROR_UPSTREAM_TIMEOUT, f"upstream timed out: {_describe(exc)}"
            ) from None
        except aiohttp.ClientError as exc:
            raise AdapterError(
                wire.ERROR_UPSTREAM, f"upstream connection failed: {_describe(exc)}"
            ) from None

    async def probe(self) -> tuple[bool, str]:
        try:
            async with self._client().get(f"{self._base_url}/models") as response:
                await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            return False, f"GET /models failed: {_describe(exc)}"
        healthy = 200 <= response.status < 300
        return healthy, f"GET /models: HTTP {response.status}"

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


async def _read_json(response: aiohttp.ClientResponse) -> dict[str, Any]:
    try:
        body = await response.json(content_type=None)
    except ValueError:
        raise AdapterError(wire.ERROR_UPSTREAM, "upstream answered with invalid JSON") from None
    if not isinstance(body, dict):
        raise AdapterError(wire.ERROR_UPSTREAM, "upstream answered with a non-object")
    if body.get("error"):
        raise AdapterError(wire.ERROR_UPSTREAM, f"upstream error: {_error_message(body)}")
    return body


def _single(completion: dict[str, Any], request: dict[str, Any]) -> list[AdapterEvent]:
    """A non-streamed completion as one delta and the final ``Done``."""
    choices = completion.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else {}
    message = choice.get("message") if isinstance(choice, dict) else None
    message = message if isinstance(message, dict) else {}
    delta = {key: value for key, value in message.items() if value is not None}
    delta.setdefault("role", "assistant")
    chunk = {
        "id": completion.get("id", "chatcmpl-upstream"),
        "object": "chat.completion.chunk",
        "created": completion.get("created", 0),
        "model": completion.get("model", ""),
        "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
    }
    content_chunks = 1 if delta.get("content") or delta.get("tool_calls") else 0
    usage = _usage(completion.get("usage"), request, content_chunks)
    finish_reason = choice.get("finish_reason") if isinstance(choice, dict) else None
    return [Delta(chunk), Done(usage, finish_reason or "stop")]


async def _relay(
    response: aiohttp.ClientResponse, request: dict[str, Any]
) -> AsyncGenerator[AdapterEvent, None]:
    finish_reason: str | None = None
    usage: Any = None
    content_chunks = 0
    finished = False
    async with contextlib.aclosing(_sse_data(_lines(response))) as payloads:
        async for payload in payloads:
            if payload == "[DONE]" or finished:
                # Read on to the end of the body: a fully read response returns its
                # connection to the pool instead of being closed.
                finished = True
                continue
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


async def _lines(response: aiohttp.ClientResponse) -> AsyncIterator[str]:
    async for raw in response.content:
        yield raw.decode("utf-8", errors="replace").rstrip("\r\n")


async def _sse_data(lines: AsyncIterator[str]) -> AsyncGenerator[str, None]:
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


async def _upstream_error(response: aiohttp.ClientResponse) -> AdapterError:
    body = await response.content.read(_ERROR_BODY_LIMIT)
    try:
        message = _error_message(json.loads(body))
    except ValueError:
        message = body[:500].decode(errors="replace").strip()
    message = message or response.reason or ""
    return AdapterError(
        wire.ERROR_UPSTREAM,
        f"upstream HTTP {response.status}: {message}",
        status=response.status,
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
