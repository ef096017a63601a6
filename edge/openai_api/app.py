"""The OpenAI API as a plain ASGI app: route, request id, CORS, caller, body.

`/v1/models` (and `/v1/models/{id}`), `/v1/chat/completions`, `/v1/completions`,
`/v1/embeddings` and `/v1/responses`, each also without the `/v1`. Django's request stack costs
about a millisecond per call; this path is the gateway's hot path, so it reads headers and body
itself and shares the in-memory runtime with the rest of the Edge. The request flow itself is
`edge.openai_api.flow`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from typing import Any

from django.conf import settings

from edge.config.schema import PrincipalToken
from edge.ha.role import EDGE_STANDBY, STANDBY_RETRY_AFTER_S
from edge.metrics import METRICS
from edge.openai_api.chat import CHAT, COMPLETIONS
from edge.openai_api.cors import ALLOWED_METHODS, allowed_origin, answer_headers, preflight_headers
from edge.openai_api.embeddings import EMBEDDINGS
from edge.openai_api.errors import APIError
from edge.openai_api.exchange import Exchange, Receive, new_request_id
from edge.openai_api.flow import Endpoint, serve
from edge.openai_api.responses import Send, send_error, send_json
from edge.openai_api.responses_api import RESPONSES
from edge.runtime import EDGE_DRAINING, EdgeRuntime, get_runtime
from edge.tokens import bearer_token

# Read once: Django's settings object is lazy and costs a lookup per attribute on the hot path.
MAX_BODY_BYTES: int = settings.IOP_MAX_BODY_BYTES
DRAINING_RETRY_AFTER_S = 5  # another Edge, or this one restarted, can take it by then
INTERNAL_ERROR = "internal_error"

log = logging.getLogger("edge.openai_api")


# POST endpoints by their path under /v1 (also served without the /v1, as LiteLLM does).
_ENDPOINTS: dict[str, Endpoint] = {
    "/chat/completions": CHAT,
    "/completions": COMPLETIONS,
    "/embeddings": EMBEDDINGS,
    "/responses": RESPONSES,
}
MODELS_PATH = "/models"
API_PATHS = frozenset({MODELS_PATH, *_ENDPOINTS})
V1 = "/v1"


def is_api_path(path: str) -> bool:
    """Whether ``path`` is one the OpenAI API serves (with or without its `/v1` prefix)."""
    path = path.rstrip("/")
    if path == V1 or path.startswith(V1 + "/"):
        return True
    return path in API_PATHS or path.startswith(MODELS_PATH + "/")


async def openai_app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    runtime = get_runtime()
    exchange = Exchange(_incoming_request_id(scope) or new_request_id())
    path, method = _api_path(scope["path"]), scope["method"]
    answer = _Answer(send)
    origin = allowed_origin(_header(scope, b"origin"), runtime.config.openai.cors_allowed_origins)
    if method == "OPTIONS" and _known(path):
        await _preflight(scope, exchange, origin, answer)
        return
    if origin is not None:
        exchange.headers += answer_headers(origin)
    runtime.drain.enter()
    try:
        if runtime.drain.draining:
            raise APIError(
                503,
                "The Edge is shutting down; retry the request.",
                code=EDGE_DRAINING,
                retry_after=DRAINING_RETRY_AFTER_S,
            )
        if not runtime.leadership.admitting:
            raise APIError(
                503,
                "This Edge is a standby; send the request to the leading Edge.",
                code=EDGE_STANDBY,
                retry_after=STANDBY_RETRY_AFTER_S,
            )
        endpoint = _ENDPOINTS.get(path)
        if endpoint is not None:
            if method != "POST":
                raise APIError(405, f"Use POST for {endpoint.path}.", code="method_not_allowed")
            _refuse_a_declared_length_over_the_limit(scope)  # before credentials, as daphne does
            _authenticate(runtime, exchange, scope)
            body = await _read_body(receive)
            await serve(runtime, exchange, endpoint, body, receive, answer)
        elif path == MODELS_PATH or path.startswith(MODELS_PATH + "/"):
            if method != "GET":
                raise APIError(405, f"Use GET for /v1{path}.", code="method_not_allowed")
            _authenticate(runtime, exchange, scope)
            await _models(runtime, exchange, path[len(MODELS_PATH) + 1 :], answer)
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


def _api_path(path: str) -> str:
    """The path without its `/v1` prefix and trailing slash: `/v1/models/` -> `/models`."""
    path = path.rstrip("/")
    return path[len(V1) :] if path == V1 or path.startswith(V1 + "/") else path


def _known(path: str) -> bool:
    return path in API_PATHS or path.startswith(MODELS_PATH + "/")


def _header(scope: dict[str, Any], wanted: bytes) -> bytes | None:
    for name, value in scope["headers"]:
        if name == wanted:
            return bytes(value)
    return None


async def _preflight(
    scope: dict[str, Any], exchange: Exchange, origin: bytes | None, send: Send
) -> None:
    """204 with what the browser may send, when the origin is allowed; a bare 204 otherwise,
    which the browser reads as a refusal (CORS is off unless origins are configured)."""
    headers = [*exchange.headers, (b"allow", ALLOWED_METHODS)]
    if origin is not None:
        headers += preflight_headers(origin, _header(scope, b"access-control-request-headers"))
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


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


def _refuse_a_declared_length_over_the_limit(scope: dict[str, Any]) -> None:
    """A declared length over the limit is refused before a byte of the body is read."""
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit() and int(value) > MAX_BODY_BYTES:
            raise body_too_large(MAX_BODY_BYTES)


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
            raise body_too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def _models(runtime: EdgeRuntime, exchange: Exchange, model_id: str, send: Send) -> None:
    """`GET /v1/models`, or `GET /v1/models/{id}` when ``model_id`` is given."""
    created = int(runtime.started_at)
    owner = runtime.config.edge.id
    if model_id:
        if model_id not in runtime.models:
            raise APIError(
                404,
                f"The model '{model_id}' does not exist.",
                code="model_not_found",
                param="model",
            )
        body = _model_object(model_id, created, owner)
    else:
        data = [_model_object(model.id, created, owner) for model in runtime.config.models]
        body = {"object": "list", "data": data}
    await send_json(send, 200, json.dumps(body).encode(), exchange.headers)


def _model_object(model_id: str, created: int, owner: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": created, "owned_by": owner}
