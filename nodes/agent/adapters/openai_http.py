"""The openai_http adapter: calls an OpenAI-compatible HTTP server (vLLM, Ollama, llama.cpp, ...).

One aiohttp session per adapter keeps a keep-alive connection pool to the upstream (aiohttp, not
httpx: measured about ten times the request rate per core here, see docs/benchmarks.md). What the
upstream answers is relayed as it sent it: a non-streaming request is sent non-streaming and its
``chat.completion`` comes back whole as a ``Response``; a streaming request is relayed chunk by
chunk, the upstream's own closing chunk included (``Done.finish_sent``). Only ``usage`` is taken
out of the chunks: the upstream is always asked for it (metering needs it), the last one it sends
goes into ``Done``, and the Edge writes the one usage chunk its caller asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import math
import os
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any, TypeGuard

import aiohttp

from nodes import wire
from nodes.agent.adapters.base import (
    CHARS_PER_TOKEN,
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
from nodes.wire.codec import MAX_TOKEN_COUNT
from nodes.wire.frames import MAX_CODE_CHARS
from nodes.wire.node_config import MAX_TOKENS_PARAMS, url_for_message

_ERROR_BODY_LIMIT = 64 * 1024
_MAX_RETRY_AFTER_S = 86_400.0  # a day: past that, a hint is no longer a hint


class OpenAIHTTPAdapter:
    def __init__(self, spec: wire.AdapterSpec, *, environ: Mapping[str, str] = os.environ) -> None:
        assert spec.base_url is not None  # guaranteed by parse_node_config
        self.id = spec.id
        # Without a probe the answer cannot change: "probed" once.
        self.probe_interval_s: float | None = (
            spec.health_interval_s if spec.health_path is not False else None
        )
        self._base_url = spec.base_url
        self._health_path = spec.health_path
        self._max_tokens_param = spec.max_tokens_param
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
        if self._max_tokens_param is not None:
            _send_max_tokens_as(body, self._max_tokens_param)
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
                        completion = await _read_completion(response)
                        yield Response(completion)
                        yield _completion_done(completion, request)
                except BaseException:
                    # Cancelled or failed mid-body: close the connection, the upstream sees it.
                    response.close()
                    raise
        except aiohttp.ClientConnectorError as exc:
            raise AdapterError(
                wire.ERROR_UPSTREAM_UNAVAILABLE,
                f"cannot reach {url_for_message(self._base_url)}: {_describe(exc)}",
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
        if self._health_path is False:
            return True, "not probed (health_path: false)"
        what = f"GET {self._health_path}"
        try:
            async with self._client().get(f"{self._base_url}{self._health_path}") as response:
                await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            return False, f"{what} failed: {_describe(exc)}"
        healthy = 200 <= response.status < 300
        return healthy, f"{what}: HTTP {response.status}"

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


def _send_max_tokens_as(body: dict[str, Any], param: str) -> None:
    """The caller's output-token limit under ``param``, for servers that know only that name."""
    limit = requested_max_tokens(body)
    for key in MAX_TOKENS_PARAMS:
        body.pop(key, None)
    if limit is not None:
        body[param] = limit


async def _read_completion(response: aiohttp.ClientResponse) -> dict[str, Any]:
    try:
        body = await response.json(content_type=None)
    except ValueError:
        raise AdapterError(wire.ERROR_UPSTREAM, "upstream answered with invalid JSON") from None
    if not isinstance(body, dict):
        raise AdapterError(wire.ERROR_UPSTREAM, "upstream answered with a non-object")
    if body.get("error"):
        raise AdapterError(wire.ERROR_UPSTREAM, f"upstream error: {_error_message(body)}")
    if not isinstance(body.get("choices"), list):
        raise AdapterError(wire.ERROR_UPSTREAM, "upstream answered without a choices list")
    return body


def _completion_done(completion: dict[str, Any], request: dict[str, Any]) -> Done:
    """The ``Done`` after a whole completion: its usage (or an estimate) and first finish."""
    choices = completion["choices"]
    first = choices[0] if choices and isinstance(choices[0], dict) else {}
    message = first.get("message")
    text = message_text(message.get("content")) if isinstance(message, dict) else ""
    estimate = math.ceil(len(text) / CHARS_PER_TOKEN)
    reason = first.get("finish_reason")
    return Done(
        _usage(completion.get("usage"), request, estimate),
        reason if isinstance(reason, str) and reason else "stop",
    )


class _Tally:
    """What a relayed stream has said so far: its last usage, and each choice's finish_reason."""

    def __init__(self) -> None:
        self.usage: dict[str, Any] | None = None
        self.finishes: dict[int, str] = {}  # choice index -> its finish_reason, once relayed
        self.indices: set[int] = set()
        self.content_chunks = 0  # for the usage estimate, when the upstream sends none

    def take(self, chunk: dict[str, Any]) -> bool:
        """Lift ``usage`` out of ``chunk`` and note its choices; False if nothing is left to relay.

        Usage is never relayed: the Edge writes one usage chunk, when its caller asks for it
        (LiteLLM sends two; the last one counts).
        """
        if "usage" in chunk:
            reported = chunk.pop("usage")
            if isinstance(reported, dict):
                self.usage = reported
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices:
            return False  # the usage-only chunk, or a keep-alive
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            index = choice.get("index", 0)
            index = index if isinstance(index, int) else 0
            self.indices.add(index)
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                self.finishes.setdefault(index, reason)
            delta = choice.get("delta")
            if isinstance(delta, dict) and (delta.get("content") or delta.get("tool_calls")):
                self.content_chunks += 1
        return True

    @property
    def every_choice_finished(self) -> bool:
        return bool(self.finishes) and self.indices <= self.finishes.keys()

    def done(self, request: dict[str, Any]) -> Done:
        reason = self.finishes.get(0) or next(iter(self.finishes.values()), "stop")
        usage = _usage(self.usage, request, self.content_chunks)
        return Done(usage, reason, finish_sent=bool(self.finishes))


async def _relay(
    response: aiohttp.ClientResponse, request: dict[str, Any]
) -> AsyncGenerator[AdapterEvent, None]:
    tally = _Tally()
    delivered_done = False
    try:
        async with (
            contextlib.aclosing(_lines(response)) as lines,
            contextlib.aclosing(_sse_data(lines)) as payloads,
        ):
            async for payload in payloads:
                if payload == "[DONE]":
                    delivered_done = True
                    break
                chunk = _parse_chunk(payload)
                if tally.take(chunk):
                    yield Delta(chunk)
    except aiohttp.ClientPayloadError:
        # The body was cut. Once every choice has its finish_reason nothing is missing (but the
        # usage, then estimated), and aiohttp may raise the cut before handing out a [DONE] it
        # still holds.
        if not tally.every_choice_finished:
            raise
    if delivered_done:
        await _read_rest(response)
    elif not tally.finishes:
        raise AdapterError(wire.ERROR_UPSTREAM, "upstream stream ended before completion")
    yield tally.done(request)


async def _read_rest(response: aiohttp.ClientResponse) -> None:
    """Read on to the end of the body, so its connection can go back to the pool.

    A stream that delivered ``[DONE]`` is done, whatever follows: a server that then cuts the
    body (llama.cpp ends every stream so) has answered in full.
    """
    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
        async for _ in response.content.iter_any():
            pass


async def _lines(response: aiohttp.ClientResponse) -> AsyncGenerator[str, None]:
    async with contextlib.aclosing(body_lines(response.content)) as lines:
        async for line in lines:
            yield line.decode("utf-8", errors="replace").rstrip("\r\n")


async def body_lines(content: aiohttp.StreamReader) -> AsyncGenerator[bytes, None]:
    """The body's lines, taken off the connection as they arrive, then its end or its cut.

    aiohttp raises a cut body at the next read even when lines that came before the cut are still
    buffered; a relay held up by the websocket would lose them (llama.cpp cuts every stream right
    after `[DONE]`). A task of its own reads them the moment they arrive. It holds at most what
    the websocket is behind by; the Edge bounds a run's output and cancels it past that.
    """
    received: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()

    async def pull() -> None:
        try:
            async for line in content:
                received.put_nowait(line)
        except Exception as exc:
            received.put_nowait(exc)
        else:
            received.put_nowait(None)

    puller = asyncio.create_task(pull())
    try:
        while (item := await received.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        puller.cancel()
        # Gone before anyone else reads the body (the rest of a finished stream is read to reuse
        # the connection); a cancel of our own still reaches us here.
        await asyncio.wait([puller])


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


def _usage(reported: Any, request: dict[str, Any], completion_estimate: int) -> wire.Usage:
    """The upstream's usage (its detail objects kept) when it sent one; otherwise an estimate."""
    if isinstance(reported, dict):
        prompt = reported.get("prompt_tokens")
        completion = reported.get("completion_tokens")
        if _token_count(prompt) and _token_count(completion):
            usage = make_usage(prompt, completion)
            total = reported.get("total_tokens")
            if _token_count(total):
                usage["total_tokens"] = total
            if isinstance(details := reported.get("prompt_tokens_details"), dict):
                usage["prompt_tokens_details"] = details
            if isinstance(details := reported.get("completion_tokens_details"), dict):
                usage["completion_tokens_details"] = details
            return usage
    return make_usage(estimate_prompt_tokens(request.get("messages")), completion_estimate)


def _token_count(value: Any) -> TypeGuard[int]:
    """A count the wire takes (an int, not a bool, 0 to 2**31 - 1)."""
    return type(value) is int and 0 <= value <= MAX_TOKEN_COUNT


async def _upstream_error(response: aiohttp.ClientResponse) -> AdapterError:
    body = await response.content.read(_ERROR_BODY_LIMIT)
    envelope: Any = None
    try:
        envelope = json.loads(body)
        message = _error_message(envelope)
    except ValueError:
        message = body[:500].decode(errors="replace").strip()
    message = message or response.reason or ""
    return AdapterError(
        wire.ERROR_UPSTREAM,
        wire.upstream_error_message(response.status, message),
        status=response.status,
        retry_after=_retry_after(response.headers.get("Retry-After")),
        upstream_code=_error_code(envelope),
    )


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header: delay-seconds or an HTTP date; None if neither."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            return None  # not an HTTP date (those are always GMT)
        seconds = (when - datetime.now(UTC)).total_seconds()
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), _MAX_RETRY_AFTER_S)


def _error_code(envelope: Any) -> str | None:
    """The ``error.code`` of an OpenAI error envelope, when it is a short string."""
    error = envelope.get("error") if isinstance(envelope, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    if isinstance(code, str) and 0 < len(code) <= MAX_CODE_CHARS:
        return code
    return None


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
