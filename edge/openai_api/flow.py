"""One OpenAI request once the caller and body are known: parse, policy, run, reply, meter.

Every endpoint (chat completions, completions, embeddings, the Responses API) goes this one way
through the provider pool, failover, metering and the decision headers; an ``Endpoint`` says only
how its body is read and how a run's events become its answer (``edge.openai_api.endpoints``).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from edge.config.policies import Policy
from edge.config.schema import Model
from edge.dispatch import DispatchError, Lease, Share, estimate_input_tokens
from edge.dispatch.estimate import requested_output_tokens
from edge.openai_api import governance
from edge.openai_api.errors import APIError
from edge.openai_api.exchange import Exchange, Receive
from edge.openai_api.requests import OpenAIRequest, apply_generation_policy, parse_json_body
from edge.openai_api.responses import SSE_HEADERS, Headers, Send, send_json
from edge.runs import ActiveRun, Chunk, CompletedRun, RunFailed, complete_run, open_run
from edge.runtime import EdgeRuntime
from edge.usage import Usage
from nodes import wire
from nodes.wire import json_text

# Read once: Django's settings object is lazy and costs a lookup per attribute on the hot path.
RUN_TIMEOUT_S: float = settings.IOP_RUN_TIMEOUT_S
ENDPOINT_NOT_SUPPORTED = "endpoint_not_supported"


@dataclass(frozen=True, slots=True)
class Call:
    """What an endpoint's answer is built from: the request as read, where it is metered."""

    runtime: EdgeRuntime
    exchange: Exchange
    usage: Usage
    request: OpenAIRequest


@dataclass(frozen=True, slots=True)
class StreamFormat:
    """How a streamed run reaches the caller as server-sent events."""

    # One batch of the run's `delta` events (or `chunk` texts), as the caller gets them.
    encode: Callable[[Call, ActiveRun, list[Chunk]], bytes]
    # The stream's last event when the run fails after the stream started.
    error: Callable[[APIError], bytes]
    # What follows the run's last event (closing and usage chunks, `[DONE]`), given its usage.
    tail: Callable[[Call, ActiveRun, dict[str, Any]], bytes]
    # The id and model the Node writes the run's chunks with, ready for the caller (``chunk``
    # events); None: the Node sends them as the upstream did.
    relay_as: Callable[[Call], wire.RelayAs] | None = None


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One OpenAI endpoint: its wire name, body reader, output-token names and answers."""

    name: wire.Endpoint
    path: str  # under /v1, for messages
    parse: Callable[[dict[str, Any]], OpenAIRequest]
    # Where `generation` applies, the names of the output-token limit (the default's last).
    max_tokens_keys: tuple[str, ...]
    # The whole answer of a run that went to its end (raises RunFailed for a malformed one).
    build: Callable[[Call, CompletedRun], dict[str, Any]]
    stream: StreamFormat | None = None  # None: never streamed
    fill_usage: bool = True  # a whole answer without `usage` gets the run's, as chat's `usage`


async def serve(
    runtime: EdgeRuntime,
    exchange: Exchange,
    endpoint: Endpoint,
    body: bytes,
    receive: Receive,
    send: Send,
) -> None:
    """Answer one request; raises APIError for anything answered before a stream starts."""
    request = endpoint.parse(parse_json_body(body))
    model = runtime.models.get(request.model)
    principal = exchange.principal
    # Metered from the model lookup on, refusals included (the column holds 128 characters).
    exchange.usage = usage = Usage(
        request_id=exchange.request_id,
        model=request.model[:128],
        endpoint=endpoint.name,
        status="cancelled" if model is not None else "model_not_found",
        principal_ref=principal.principal_ref if principal else "",
        token_ref=principal.token_ref if principal else "",
        alias=(principal.alias or "") if principal else "",
    )
    try:
        run_body = _admitted_body(endpoint, request, model)
    except APIError as error:
        usage.status = error.code or "invalid_request"
        raise
    call = Call(runtime, exchange, usage, request)
    estimated = estimate_input_tokens(run_body)
    run_args = (runtime, request.model, run_body, estimated, RUN_TIMEOUT_S)
    run_options: dict[str, Any] = {
        "on_attempt": functools.partial(_meter_attempt, usage),
        "endpoint": endpoint.name,
        "avoid": _others_than_state_holder(runtime, request),
    }
    # The tokens it may use: reserved under its principal's limits, charged by fair queuing.
    charge = estimated + requested_output_tokens(run_body, endpoint.max_tokens_keys)
    # Before the pool: a request over its principal's limits never queues (edge.governance).
    admission = governance.admit(runtime, exchange, usage, request.model, charge)
    run_options["share"] = _fair_share(usage, admission.policy, charge)
    watcher = asyncio.ensure_future(_cancel_on_disconnect(receive, asyncio.current_task()))
    try:
        if request.stream and endpoint.stream is not None:
            relay_as = endpoint.stream.relay_as
            run_options["relay_as"] = None if relay_as is None else relay_as(call)
            async with open_run(*run_args, **run_options) as run:
                exchange.headers += _decision_headers(run)
                await _relay_stream(call, endpoint.stream, run, send)
        else:
            completed = await complete_run(*run_args, **run_options)
            await _answer_whole(call, endpoint, completed, send)
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
        governance.settle(admission, usage)


def _fair_share(usage: Usage, policy: Policy, charge: int) -> Share:
    """Whose request it is for the pool's fair queuing: its principal's weight and class (from
    the policy its admission resolved), charged by the tokens it may use."""
    return Share(usage.principal_ref, policy.weight, policy.priority_class, charge)


def _admitted_body(endpoint: Endpoint, request: OpenAIRequest, model: Model | None) -> Any:
    """The body the run gets, or the APIError that refuses the request before any run."""
    if model is None:
        raise APIError(
            404,
            f"The model '{request.model}' does not exist.",
            code="model_not_found",
            param="model",
        )
    if endpoint.name not in model.endpoints:
        served = ", ".join(sorted(model.endpoints))
        raise APIError(
            400,
            f"The model '{request.model}' does not serve {endpoint.path} (it serves: {served}).",
            code=ENDPOINT_NOT_SUPPORTED,
            param="model",
        )
    if not endpoint.max_tokens_keys:
        return request.body
    return apply_generation_policy(request.body, model.generation, endpoint.max_tokens_keys)


def _others_than_state_holder(runtime: EdgeRuntime, request: OpenAIRequest) -> frozenset[str]:
    """A follow-up of a response the Edge relayed goes only to the provider that served it,
    while that provider still serves the model; otherwise anywhere (docs/api.md)."""
    if request.previous_response_id is None:
        return frozenset()
    holder = runtime.response_routes.provider_of(request.previous_response_id)
    routes = runtime.pool.providers_of(request.model)
    if holder is None or holder not in routes:
        return frozenset()
    return routes - {holder}


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
    usage.prompt_tokens = counts.get("prompt_tokens", 0)
    usage.completion_tokens = counts.get("completion_tokens", 0)
    usage.status = run.status
    return counts


async def _answer_whole(call: Call, endpoint: Endpoint, run: CompletedRun, send: Send) -> None:
    try:
        body = endpoint.build(call, run)
    except RunFailed as failure:  # events that do not add up to an answer
        failure.attempts, failure.tried = run.attempts, run.tried
        raise
    exchange = call.exchange
    exchange.headers += _decision_headers(run)
    counts = _finish_usage(call.usage, run)
    if endpoint.fill_usage and body.get("usage") is None:
        body["usage"] = counts
    await send_json(send, 200, json_text.dumps_bytes(body), exchange.headers)


async def _relay_stream(call: Call, form: StreamFormat, run: ActiveRun, send: Send) -> None:
    exchange = call.exchange
    started = False
    try:
        async for batch in run.delta_batches():
            if not started:
                # Held back until the first event: a run failing before it gets a real status.
                exchange.first_token_at = time.monotonic()
                start = SSE_HEADERS + exchange.headers
                await send({"type": "http.response.start", "status": 200, "headers": start})
                started = True
            body = form.encode(call, run, batch)
            await send({"type": "http.response.body", "body": body, "more_body": True})
    except RunFailed as failure:
        if not started:
            raise
        # Headers are gone already: the error becomes the stream's last event.
        error = APIError.from_run_failure(failure)
        call.usage.status = error.code or failure.code  # what the caller saw
        await send({"type": "http.response.body", "body": form.error(error)})
        return
    if not started:
        start = SSE_HEADERS + exchange.headers
        await send({"type": "http.response.start", "status": 200, "headers": start})
    counts = _finish_usage(call.usage, run)
    await send({"type": "http.response.body", "body": form.tail(call, run, counts)})
