"""`/v1/models` and `/v1/chat/completions` as a plain ASGI app: route, request id, caller, body.

Django's request stack costs about a millisecond per call; this path is the gateway's hot path,
so it reads headers and body itself and shares the in-memory runtime with the rest of the Edge.
The chat flow itself is `edge.openai_api.chat`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import time
from typing import Any

from django.conf import settings

from edge.config.schema import PrincipalToken
from edge.metrics import METRICS
from edge.openai_api.chat import chat
from edge.openai_api.errors import APIError
from edge.openai_api.exchange import Exchange, Receive
from edge.openai_api.responses import Send, send_error, send_json
from edge.runtime import EDGE_DRAINING, EdgeRuntime, get_runtime
from edge.tokens import bearer_token

# Read once: Django's settings object is lazy and costs a lookup per attribute on the hot path.
MAX_BODY_BYTES: int = settings.IOP_MAX_BODY_BYTES
DRAINING_RETRY_AFTER_S = 5  # another Edge, or this one restarted, can take it by then
INTERNAL_ERROR = "internal_error"

log = logging.getLogger("edge.openai_api")


async def openai_app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    runtime = get_runtime()
    exchange = Exchange(_incoming_request_id(scope) or os.urandom(12).hex())
    path, method = scope["path"].rstrip("/"), scope["method"]
    answer = _Answer(send)
    runtime.drain.enter()
    try:
        if runtime.drain.draining:
            raise APIError(
                503,
                "The Edge is shutting down; retry the request.",
                code=EDGE_DRAINING,
                retry_after=DRAINING_RETRY_AFTER_S,
            )
        if path == "/v1/chat/completions":
            if method != "POST":
                raise APIError(405, "Use POST for /v1/chat/completions.", code="method_not_allowed")
            _authenticate(runtime, exchange, scope)
            await chat(runtime, exchange, await _read_body(scope, receive), receive, answer)
        elif path == "/v1/models":
            if method != "GET":
                raise APIError(405, "Use GET for /v1/models.", code="method_not_allowed")
            _authenticate(runtime, exchange, scope)
            await _models(runtime, exchange, answer)
        else:
            raise APIError(404, f"Unknown endpoint {method} {scope['path']}.", code="not_found")
    except APIError as error:
        await send_error(answer, error, exchange.headers)
    except Exception:
        # A bug, not the caller's doing: logged with its traceback, answered with the envelope
        # (not the server's HTML page) unless the answer had started already.
        log.exception("request %s failed", exchange.request_id)
        if exchange.usage is not None:
            exchange.usage.status = INTERNAL_ERROR
        if answer.started:
            raise
        failure = APIError(500, "The Edge failed to handle this request.", code=INTERNAL_ERROR)
        await send_error(answer, failure, exchange.headers)
    finally:
        runtime.drain.leave()
        if exchange.usage is not None:
            exchange.usage.total_ms = (time.monotonic() - exchange.started) * 1000
            runtime.usage.record(exchange.usage)
            METRICS.record_request(exchange.usage, exchange.first_token_s(), runtime.models)


class _Answer:
    """The ASGI ``send``, noting whether the response has started."""

    __slots__ = ("send", "started")

    def __init__(self, send: Send) -> None:
        self.send = send
        self.started = False

    async def __call__(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.started = True
        await self.send(message)


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
    if principal is None:
        if runtime.config.openai.require_auth:
            message = "Missing bearer token." if not token else "Invalid bearer token."
            raise APIError(401, message, code="invalid_api_key")
        principal = UNKNOWN_TOKEN if token else ANONYMOUS
    exchange.principal = principal


# Who a caller served without a known token (`openai.require_auth: false`) is metered as: no
# configured principal_ref can be either (a ref starts with a letter or digit), and a wrong
# token shows as such without the token itself being kept.
ANONYMOUS = PrincipalToken(
    token_ref="", token_hash_sha256="", principal_ref="(anonymous)", alias=None
)
UNKNOWN_TOKEN = PrincipalToken(
    token_ref="", token_hash_sha256="", principal_ref="(unknown token)", alias=None
)


def body_too_large(limit: int) -> APIError:
    """The answer to a body over ``limit`` (also given by the HTTP server itself, see
    ``iop_site.daphne_tuning``, before such a body is read)."""
    return APIError(413, f"The request body exceeds {limit} bytes.", code="body_too_large")


async def _read_body(scope: dict[str, Any], receive: Receive) -> bytes:
    limit = MAX_BODY_BYTES
    for name, value in scope["headers"]:
        # A declared length over the limit is refused before a byte of the body is read.
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            raise body_too_large(limit)
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise asyncio.CancelledError
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise body_too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def _models(runtime: EdgeRuntime, exchange: Exchange, send: Send) -> None:
    created = int(runtime.started_at)
    data = [
        {"id": model.id, "object": "model", "created": created, "owned_by": runtime.config.edge.id}
        for model in runtime.config.models
    ]
    body = json.dumps({"object": "list", "data": data}).encode()
    await send_json(send, 200, body, exchange.headers)
