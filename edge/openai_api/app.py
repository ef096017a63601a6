"""`/v1/models` and `/v1/chat/completions` as a plain ASGI app.

Django's request stack costs about a millisecond per call; this path is the gateway's hot path,
so it reads headers and body itself and shares the in-memory runtime with the rest of the Edge.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings

from edge.config.schema import PrincipalToken
from edge.dispatch import DispatchError, estimate_input_tokens
from edge.openai_api.assemble import assemble_message
from edge.openai_api.errors import APIError
from edge.openai_api.requests import (
    ChatRequest,
    apply_generation_policy,
    parse_chat_request,
    parse_json_body,
)
from edge.openai_api.responses import (
    SSE_DONE,
    SSE_HEADERS,
    Headers,
    Send,
    send_error,
    send_json,
    sse_event,
)
from edge.runtime import EdgeRuntime, get_runtime
from edge.service import DEADLINE_EXCEEDED, ActiveRun, RunFailed, open_run
from edge.tokens import bearer_token
from edge.usage import Usage
from nodes import wire

Receive = Callable[[], Awaitable[dict[str, Any]]]

# Read once: Django's settings object is lazy and costs a lookup per attribute on the hot path.
MAX_BODY_BYTES: int = settings.IOP_MAX_BODY_BYTES
RUN_TIMEOUT_S: float = settings.IOP_RUN_TIMEOUT_S




class Exchange:
    """One request: its id, caller, the decision headers so far and what to meter."""

    __slots__ = ("headers", "principal", "request_id", "responded", "started", "usage")

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.started = time.monotonic()
        self.headers: Headers = [(b"x-request-id", request_id.encode())]
        self.principal: PrincipalToken | None = None
        self.usage: Usage | None = None
        self.responded = False  # the response has started: no second try


async def openai_app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    runtime = get_runtime()
    exchange = Exchange(_incoming_request_id(scope) or os.urandom(12).hex())
    path, method = scope["path"].rstrip("/"), scope["method"]
    try:
        if path == "/v1/chat/completions":
            if method != "POST":
                raise APIError(405, "Use POST for /v1/chat/completions.", code="method_not_allowed")
            await _chat(runtime, exchange, scope, receive, send)
        elif path == "/v1/models":
            if method != "GET":
                raise APIError(405, "Use GET for /v1/models.", code="method_not_allowed")
            _authenticate(runtime, exchange, scope)
            await _models(runtime, exchange, send)
        else:
            raise APIError(404, f"Unknown endpoint {method} {scope['path']}.", code="not_found")
    except APIError as error:
        await send_error(send, error, exchange.headers)
    finally:
        if exchange.usage is not None:
            exchange.usage.total_ms = (time.monotonic() - exchange.started) * 1000
            runtime.usage.record(exchange.usage)


# A caller's own request id is kept when it is plainly an id (it goes back out as a header).
_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:-]{1,64}")


def _incoming_request_id(scope: dict[str, Any]) -> str | None:
    for name, value in scope["headers"]:
        if name == b"x-request-id" and _REQUEST_ID.fullmatch(value):
            return value.decode()
    return None


def _authenticate(runtime: EdgeRuntime, exchange: Exchange, scope: dict[str, Any]) -> None:
    token = None
    for name, value in scope["headers"]:
        if name == b"authorization":
            token = bearer_token(value)
            break
    principal = runtime.principal_for(token) if token else None
    if principal is None and runtime.config.openai.require_auth:
        message = "Missing bearer token." if not token else "Invalid bearer token."
        raise APIError(401, message, code="invalid_api_key")
    exchange.principal = principal


async def _models(runtime: EdgeRuntime, exchange: Exchange, send: Send) -> None:
    created = int(runtime.started_at)
    data = [
        {"id": model.id, "object": "model", "created": created, "owned_by": runtime.config.edge.id}
        for model in runtime.config.models
    ]
    body = json.dumps({"object": "list", "data": data}).encode()
    await send_json(send, 200, body, exchange.headers)


async def _read_body(receive: Receive) -> bytes:
    limit = MAX_BODY_BYTES
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise asyncio.CancelledError
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise APIError(413, f"The request body exceeds {limit} bytes.", code="body_too_large")
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def _chat(
    runtime: EdgeRuntime, exchange: Exchange, scope: dict[str, Any], receive: Receive, send: Send
) -> None:
    _authenticate(runtime, exchange, scope)
    request = parse_chat_request(parse_json_body(await _read_body(receive)))
    model = runtime.models.get(request.model)
    principal = exchange.principal
    # Metered from the model lookup on, refusals included (the column holds 128 characters).
    exchange.usage = usage = Usage(
        request_id=exchange.request_id,
        model=request.model[:128],
        status="cancelled" if model is not None else "model_not_found",
        principal_ref=principal.principal_ref if principal else "",
        token_ref=principal.token_ref if principal else "",
        alias=(principal.alias or "") if principal else "",
    )
    if model is None:
        raise APIError(
            404,
            f"The model '{request.model}' does not exist.",
            code="model_not_found",
            param="model",
        )
    try:
        body = apply_generation_policy(request.body, model.generation)
    except APIError as error:
        usage.status = error.code or "invalid_request"
        raise
    watcher = asyncio.ensure_future(_cancel_on_disconnect(receive, asyncio.current_task()))
    estimated = estimate_input_tokens(body)
    try:
        for attempt in range(2):
            try:
                async with open_run(runtime, request.model, body, estimated, RUN_TIMEOUT_S) as run:
                    _note_decision(exchange, run)
                    if request.stream:
                        await _stream(exchange, request, run, send)
                    else:
                        await _complete(exchange, request, run, send)
                return
            except RunFailed as failure:
                # A draining Node refuses new runs before its "unhealthy" report has arrived:
                # nothing ran, so once more elsewhere while the caller has seen nothing yet.
                if attempt or failure.code != wire.ERROR_NODE_DRAINING or exchange.responded:
                    raise
                runtime.pool.set_provider_health(usage.provider, False)  # its Node says so soon
                exchange.headers = exchange.headers[:1]  # drop the first try's decision
    except DispatchError as error:
        usage.status = error.code
        raise APIError.from_dispatch(error) from None
    except RunFailed as failure:
        usage.status = failure.code
        raise _run_error(failure) from None
    finally:
        watcher.cancel()


async def _cancel_on_disconnect(receive: Receive, task: asyncio.Task[Any] | None) -> None:
    """The caller went away: cancel the request so its run is cancelled and its lease freed."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            if task is not None:
                task.cancel()
            return


def _note_decision(exchange: Exchange, run: ActiveRun) -> None:
    lease = run.lease
    exchange.headers += [
        (b"x-iop-provider", lease.provider_id.encode()),
        (b"x-iop-node", lease.node_id.encode()),
        (b"x-iop-context-class", lease.context_class.encode()),
        (b"x-iop-queue-ms", f"{lease.queued_ms:.1f}".encode()),
    ]
    usage = exchange.usage
    usage.provider, usage.node = lease.provider_id, lease.node_id
    usage.context_class, usage.queue_ms = lease.context_class, lease.queued_ms


def _finish_usage(exchange: Exchange, run: ActiveRun) -> dict[str, int]:
    usage = run.usage or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    exchange.usage.prompt_tokens = usage["prompt_tokens"]
    exchange.usage.completion_tokens = usage["completion_tokens"]
    exchange.usage.status = run.status
    return usage


async def _complete(exchange: Exchange, request: ChatRequest, run: ActiveRun, send: Send) -> None:
    message = assemble_message([chunk async for chunk in run.deltas()])
    usage = _finish_usage(exchange, run)
    body = {
        "id": f"chatcmpl-{exchange.request_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": run.finish_reason,
                "logprobs": None,
            }
        ],
        "usage": usage,
    }
    await send_json(send, 200, json.dumps(body).encode(), exchange.headers)


async def _stream(exchange: Exchange, request: ChatRequest, run: ActiveRun, send: Send) -> None:
    completion_id = f"chatcmpl-{exchange.request_id}"
    started = False
    try:
        async for batch in run.delta_batches():
            if not started:
                # Held back until the first token: a run failing before it gets a real status.
                start = SSE_HEADERS + exchange.headers
                await send({"type": "http.response.start", "status": 200, "headers": start})
                started = exchange.responded = True
            for chunk in batch:
                chunk["id"], chunk["model"] = completion_id, request.model
            body = b"".join(map(sse_event, batch))
            await send({"type": "http.response.body", "body": body, "more_body": True})
    except RunFailed as failure:
        if not started:
            raise
        # Headers are gone already: the error becomes the stream's last event.
        exchange.usage.status = failure.code
        error = _run_error(failure)
        await send({"type": "http.response.body", "body": sse_event(error.envelope())})
        return
    if not started:
        start = SSE_HEADERS + exchange.headers
        await send({"type": "http.response.start", "status": 200, "headers": start})
    usage = _finish_usage(exchange, run)
    # Deltas never carry a finish_reason (docs/wire.md): the Edge writes the closing chunk.
    tail = sse_event(
        {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": request.model,
            "choices": [{"index": 0, "delta": {}, "finish_reason": run.finish_reason}],
        }
    )
    if request.include_usage:
        tail += sse_event(
            {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": request.model,
                "choices": [],
                "usage": usage,
            }
        )
    await send({"type": "http.response.body", "body": tail + SSE_DONE})


# Upstream answers that blame the request itself (e.g. a prompt over the context length): a 4xx,
# so clients do not retry what cannot succeed.
UPSTREAM_REJECTIONS = frozenset({400, 413, 422})


def _run_error(failure: RunFailed) -> APIError:
    status, code = (504 if failure.code == DEADLINE_EXCEEDED else 502), failure.code
    message = failure.message
    if failure.upstream_status is not None:
        message = f"Upstream returned {failure.upstream_status}: {message}"
        if failure.upstream_status in UPSTREAM_REJECTIONS:
            status, code = 400, "upstream_rejected"
    return APIError(status, message, code=code)
