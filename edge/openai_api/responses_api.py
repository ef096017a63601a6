"""`/v1/responses`: the Responses API, relayed statelessly (`edge.openai_api.flow`).

The upstream's Response object, or its stream of events, reaches the caller as it was sent,
with only `model` (the caller's name for it) changed; the response `id` stays the upstream's,
since a follow-up names it in `previous_response_id`. Each id is remembered with the provider
that served it, so that follow-up goes back there (``edge.dispatch.affinity``).
"""

from __future__ import annotations

import json
import re
from typing import Any, cast

from edge.openai_api.assemble import BAD_NODE_RESPONSE
from edge.openai_api.endpoint_requests import (
    RESPONSES_MAX_TOKENS_KEYS,
    parse_responses_request,
)
from edge.openai_api.errors import APIError
from edge.openai_api.flow import Call, Endpoint, StreamFormat
from edge.runs import ActiveRun, Chunk, CompletedRun, RunFailed

COMPLETED = "response.completed"
# An event's `type` goes out as its SSE `event:` line: only a plain name may (no line breaks).
_EVENT_TYPE = re.compile(r"[A-Za-z0-9._-]{1,128}")


def _build(call: Call, run: CompletedRun) -> dict[str, Any]:
    """The Response object: the Node's whole one, else the one its streamed events ended with."""
    response = run.response
    if response is None:
        finals = [e.get("response") for e in run.chunks if e.get("type") == COMPLETED]
        response = finals[-1] if finals else None
    if not isinstance(response, dict):
        raise RunFailed(BAD_NODE_RESPONSE, "the Node sent no Response object")
    call.runtime.response_routes.remember(response.get("id"), run.lease.provider_id)
    return {**response, "model": call.request.model}


def _encode(call: Call, run: ActiveRun, batch: list[Chunk]) -> bytes:
    parts = []
    for event in cast("list[dict[str, Any]]", batch):  # no relay_as: the events as sent
        response = event.get("response")
        if isinstance(response, dict):  # response.created, .in_progress, .completed, ...
            response["model"] = call.request.model
            call.runtime.response_routes.remember(response.get("id"), run.lease.provider_id)
        event_type = event.get("type")
        if not (isinstance(event_type, str) and _EVENT_TYPE.fullmatch(event_type)):
            event_type = "message"
        parts.append(_sse(event_type, event))
    return b"".join(parts)


def _error(error: APIError) -> bytes:
    """The Responses API's `error` event; its `error` member is what the SDKs raise from."""
    envelope = error.envelope()
    event = {"type": "error", "code": error.code, "message": error.message, "param": error.param}
    return _sse("error", {**event, **envelope})


def _tail(call: Call, run: ActiveRun, counts: dict[str, Any]) -> bytes:
    return b""  # the upstream's own `response.completed` ended the stream; no `[DONE]` here


def _sse(event_type: str, data: Any) -> bytes:
    body = json.dumps(data, separators=(",", ":")).encode()
    return b"event: " + event_type.encode() + b"\ndata: " + body + b"\n\n"


RESPONSES = Endpoint(
    name="responses",
    path="/v1/responses",
    parse=parse_responses_request,
    max_tokens_keys=RESPONSES_MAX_TOKENS_KEYS,
    build=_build,
    stream=StreamFormat(_encode, _error, _tail),
    fill_usage=False,  # its usage is input_tokens/output_tokens, the upstream's own
)
