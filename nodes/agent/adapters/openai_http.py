"""The openai_http adapter: calls an OpenAI-compatible HTTP server (vLLM, Ollama, llama.cpp, ...).

One aiohttp session per adapter keeps a keep-alive connection pool to the upstream (aiohttp, not
httpx: measured about ten times the request rate per core here, see docs/benchmarks.md). Each run
is a POST to the path of its endpoint under ``base_url``; what the upstream answers is relayed as
it sent it: a non-streaming request is sent non-streaming and its answer comes back whole as a
``Response``, a streaming one is relayed event by event (``openai_chunks``, ``openai_responses``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import aiohttp

from nodes import wire
from nodes.agent.adapters.base import (
    AdapterError,
    AdapterEvent,
    Done,
    Response,
    requested_max_tokens,
)
from nodes.agent.adapters.openai_chunks import completion_done, read_answer, relay_chunks
from nodes.agent.adapters.openai_responses import embeddings_done, relay_responses, response_done
from nodes.agent.adapters.silence import silence_limit
from nodes.agent.adapters.upstream_errors import describe, upstream_error
from nodes.wire import json_text
from nodes.wire.node_config import MAX_TOKENS_PARAMS, url_for_message

# Each endpoint's path under the upstream's base URL (which ends in its /v1).
PATHS: Mapping[wire.Endpoint, str] = {
    "chat.completions": "/chat/completions",
    "completions": "/completions",
    "embeddings": "/embeddings",
    "responses": "/responses",
}
JSON_BODY = {"Content-Type": "application/json"}


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
        self._read_timeout_s = spec.timeout_s
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

    def _body(
        self, request: dict[str, Any], target: str, endpoint: wire.Endpoint, streaming: bool
    ) -> dict[str, Any]:
        """What goes upstream: the caller's body, for ``target``, asking for usage."""
        if endpoint == "embeddings":
            return {**request, "model": target}
        body = {**request, "model": target, "stream": streaming}
        if endpoint == "responses":
            return body  # usage comes in the Response object, asked or not
        if endpoint == "chat.completions" and self._max_tokens_param is not None:
            _send_max_tokens_as(body, self._max_tokens_param)
        if streaming:
            options = request.get("stream_options")
            body["stream_options"] = {
                **(options if isinstance(options, dict) else {}),
                "include_usage": True,
            }
        else:
            body.pop("stream_options", None)
        return body

    async def stream(
        self,
        request: dict[str, Any],
        target: str,
        endpoint: wire.Endpoint = wire.DEFAULT_ENDPOINT,
    ) -> AsyncGenerator[AdapterEvent, None]:
        streaming = request.get("stream") is True and endpoint != "embeddings"
        body = self._body(request, target, endpoint, streaming)
        url = f"{self._base_url}{PATHS[endpoint]}"
        # Encoded by orjson, not aiohttp's json.dumps: a 1.2 MB body took 13 ms of the Node's
        # loop (every other run's tokens waiting), now 0.5 ms; lone surrogates escaped as before.
        # Held until the answer ends: without the buffer orjson wrote it in.
        data = json_text.dumps_bytes_to_hold(body)
        try:
            async with self._client().post(url, data=data, headers=JSON_BODY) as response:
                try:
                    if response.status >= 300:
                        raise await upstream_error(response)
                    # Some servers stream whatever was asked: follow what came back.
                    if streaming or response.content_type == "text/event-stream":
                        relay = (
                            relay_responses(response, request)
                            if endpoint == "responses"
                            else relay_chunks(response, request, endpoint)
                        )
                        with silence_limit(response, self._read_timeout_s):
                            async with contextlib.aclosing(relay) as events:
                                async for event in events:
                                    yield event
                    else:
                        answer = await read_answer(response)
                        done = _whole_done(answer, request, endpoint)
                        yield Response(answer)
                        yield done
                except BaseException:
                    # Cancelled or failed mid-body: close the connection, the upstream sees it.
                    response.close()
                    raise
        except aiohttp.ClientConnectorError as exc:
            raise AdapterError(
                wire.ERROR_UPSTREAM_UNAVAILABLE,
                f"cannot reach {url_for_message(self._base_url)}: {describe(exc)}",
            ) from None
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise AdapterError(
                wire.ERROR_UPSTREAM_TIMEOUT, f"upstream timed out: {describe(exc)}"
            ) from None
        except aiohttp.ClientError as exc:
            raise AdapterError(
                wire.ERROR_UPSTREAM, f"upstream connection failed: {describe(exc)}"
            ) from None

    async def probe(self) -> tuple[bool, str]:
        if self._health_path is False:
            return True, "not probed (health_path: false)"
        what = f"GET {self._health_path}"
        try:
            async with self._client().get(f"{self._base_url}{self._health_path}") as response:
                await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            return False, f"{what} failed: {describe(exc)}"
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


def _whole_done(answer: dict[str, Any], request: dict[str, Any], endpoint: wire.Endpoint) -> Done:
    """The ``Done`` after a whole answer; raises when the answer lacks its endpoint's list."""
    if endpoint == "embeddings":
        return embeddings_done(answer, request)
    if endpoint == "responses":
        return response_done(answer, request)
    return completion_done(answer, request, endpoint)
