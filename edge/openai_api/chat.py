"""`/v1/chat/completions` once the caller and body are known: parse, policy, run, reply, meter."""

from __future__ import annotations

import asyncio
import functools
import json
import time
from typing import Any

from django.conf import settings

from edge.dispatch import DispatchError, Lease, estimate_input_tokens
from edge.openai_api.assemble import assemble_choices
from edge.openai_api.errors import APIError
from edge.openai_api.exchange import Exchange, Receive
from edge.openai_api.requests import (
    ChatRequest,
    apply_generation_policy,
    parse_chat_request,
    parse_json_body,
)
from edge.openai_api.responses import SSE_DONE, SSE_HEADERS, Headers, Send, send_json, sse_event
from edge.runs import ActiveRun, CompletedRun, RunFailed, complete_run, open_run
from edge.runtime import EdgeRuntime
from edge.usage import Usage

# Read once: Django's settings object is lazy and costs a lookup per attribute on the hot path.
RUN_TIMEOUT_S: float = settings.IOP_RUN_TIMEOUT_S


async def chat(
    runtime: EdgeRuntime, exchange: Exchange, body: bytes, receive: Receive, send: Send
) -> None:
    """Answer one chat completion; raises APIError for anything answered before a stream starts."""
    request = parse_chat_request(parse_json_body(body))
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
        run_body = apply_generation_policy(request.body, model.generation)
    except APIError as error:
        usage.status = error.code or "invalid_request"
        raise
    watcher = asyncio.ensure_future(_cancel_on_disconnect(receive, asyncio.current_task()))
    estimated = estimate_input_tokens(run_body)
    on_attempt = functools.partial(_meter_attempt, usage)
    try:
        if request.stream:
            async with open_run(
                runtime, request.model, run_body, estimated, RUN_TIMEOUT_S, on_attempt
            ) as run:
                exchange.headers += _decision_headers(run)
                await _stream(exchange, usage, request, run, send)
        else:
            completed = await complete_run(
                runtime, request.model, run_body, estimated, RUN_TIMEOUT_S, on_attempt
            )
            await _complete(exchange, usage, request, completed, send)
    except DispatchError as error:
        api_error = APIError.from_dispatch(error)
        usage.status = api_error.code or error.code  # what the caller saw
        raise api_error from None
    except RunFailed as failure:
        api_error = APIError.from_run_failure(failure)
        usage.status = api_error.code or failure.code
        if failure.attempts and not any(name == b"x-iop-attempts" for name, _ in exchange.headers):
            exchange.headers += _failure_headers(usage, failure)  # unless the answer had them
        raise api_error from None
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


def _meter_attempt(usage: Usage, lease: Lease) -> None:
    """Each attempt as it starts: the row names the last one, and counts them all."""
    usage.provider, usage.node = lease.provider_id, lease.node_id
    usage.context_class, usage.queue_ms = lease.context_class, lease.queued_ms
    usage.attempts += 1
    tried = usage.providers_tried
    usage.providers_tried = f"{tried},{lease.provider_id}" if tried else lease.provider_id


def _decision_headers(run: ActiveRun | CompletedRun) -> Headers:
    lease = run.lease
    return _headers(
        lease.provider_id,
        lease.node_id,
        lease.context_class,
        lease.queued_ms,
        run.attempts,
        run.tried,
    )


def _failure_headers(usage: Usage, failure: RunFailed) -> Headers:
    """A failed run's answer says where it went too: its last attempt, as metered."""
    return _headers(
        usage.provider,
        usage.node,
        usage.context_class,
        usage.queue_ms,
        failure.attempts,
        failure.tried,
    )


def _headers(
    provider: str,
    node: str,
    context_class: str,
    queue_ms: float,
    attempts: int,
    tried: tuple[str, ...],
) -> Headers:
    return [
        (b"x-iop-provider", provider.encode()),
        (b"x-iop-node", node.encode()),
        (b"x-iop-context-class", context_class.encode()),
        (b"x-iop-queue-ms", f"{queue_ms:.1f}".encode()),
        # How many providers the run went to, and which, in order (failover).
        (b"x-iop-attempts", str(attempts).encode()),
        (b"x-iop-providers-tried", ",".join(tried).encode()),
    ]


def _finish_usage(usage: Usage, run: ActiveRun | CompletedRun) -> dict[str, Any]:
    """Meter the run's usage; return it as the caller gets it (with the upstream's details)."""
    counts = run.usage or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    usage.prompt_tokens = counts["prompt_tokens"]
    usage.completion_tokens = counts["completion_tokens"]
    usage.status = run.status
    return counts


async def _complete(
    exchange: Exchange, usage: Usage, request: ChatRequest, run: CompletedRun, send: Send
) -> None:
    try:
        body = _completion(exchange, request, run)
    except RunFailed as failure:  # chunks that do not add up to a completion
        failure.attempts, failure.tried = run.attempts, run.tried
        raise
    exchange.headers += _decision_headers(run)
    counts = _finish_usage(usage, run)
    if body.get("usage") is None:
        body["usage"] = counts
    await send_json(send, 200, json.dumps(body).encode(), exchange.headers)


def _completion(exchange: Exchange, request: ChatRequest, run: CompletedRun) -> dict[str, Any]:
    """The chat.completion the caller gets: the upstream's own when the Node relayed it whole,
    with only the model (the caller's name for it) and the id changed; else put together from
    the chunks the run streamed."""
    completion_id = f"chatcmpl-{exchange.request_id}"
    if run.response is not None:
        return {**run.response, "id": completion_id, "model": request.model}
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": assemble_choices(run.chunks, run.finish_reason),
    }


async def _stream(
    exchange: Exchange, usage: Usage, request: ChatRequest, run: ActiveRun, send: Send
) -> None:
    completion_id = f"chatcmpl-{exchange.request_id}"
    started = False
    try:
        async for batch in run.delta_batches():
            if not started:
                # Held back until the first token: a run failing before it gets a real status.
                exchange.first_token_at = time.monotonic()
                start = SSE_HEADERS + exchange.headers
                await send({"type": "http.response.start", "status": 200, "headers": start})
                started = True
            for chunk in batch:
                chunk["id"], chunk["model"] = completion_id, request.model
                chunk.pop("usage", None)  # the caller gets one usage chunk, the Edge's
            body = b"".join(map(sse_event, batch))
            await send({"type": "http.response.body", "body": body, "more_body": True})
    except RunFailed as failure:
        if not started:
            raise
        # Headers are gone already: the error becomes the stream's last event.
        error = APIError.from_run_failure(failure)
        usage.status = error.code or failure.code  # what the caller saw
        await send({"type": "http.response.body", "body": sse_event(error.envelope())})
        return
    if not started:
        start = SSE_HEADERS + exchange.headers
        await send({"type": "http.response.start", "status": 200, "headers": start})
    counts = _finish_usage(usage, run)
    tail = b""
    if not run.finish_sent:
        # The adapter relayed no closing chunk of its own (echo, or llama.cpp's bare [DONE]).
        tail += sse_event(
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
                "usage": counts,
            }
        )
    await send({"type": "http.response.body", "body": tail + SSE_DONE})
