"""Wire frame shapes (DESIGN §5): constants, one ``TypedDict`` per frame type, and builders.

Frames are plain dicts: building one is a dict literal and encoding it is one ``json.dumps``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NotRequired, TypedDict

from nodes.wire.node_config import NodePayload

PROTOCOL_VERSION = 1

# The sizes, chosen once (docs/wire.md, "Sizes"); every layer derives its own from these.
MAX_FRAME_BYTES = 1024 * 1024  # one frame as sent, in UTF-8 bytes; larger ones travel in parts
# The largest request body a run carries: the Edge's IOP_MAX_BODY_BYTES defaults to it and may
# only lower it.
MAX_BODY_BYTES = 8 * 1024 * 1024
# One frame put back together from its parts: a body at the limit, its run.request envelope, and
# room for the body's JSON re-encoding.
MAX_MESSAGE_BYTES = 2 * MAX_BODY_BYTES
# The websocket limit on both sides: above the frame limit, so an oversized frame still reaches
# the codec and costs only the run it names, not the whole session.
MAX_SOCKET_MESSAGE_BYTES = 4 * MAX_FRAME_BYTES

# The bounds of every frame field (docs/wire.md, "Field bounds"): ``decode`` refuses a field
# past its bound (``bad_field``), and the builders clip free text to it, so a peer's own words (an
# upstream's error message, a probe's detail) never cost it the frame.
MAX_ID_CHARS = 256  # run, node, provider, adapter and refresh ids, served model names
MAX_REVISION_CHARS = 128  # a config revision (the Edge sends "sha256:" and 64 hex digits)
MAX_VERSION_CHARS = 64  # hello.agent_version
MAX_CODE_CHARS = 64  # error codes, an upstream's own code, finish_reason
MAX_MESSAGE_CHARS = 8 * 1024  # error messages: error frames, run errors, a config.ack's reason
MAX_DETAIL_CHARS = 1024  # a provider.health detail
MAX_HEALTH_PROVIDERS = 1024  # providers in one provider.health frame


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, marked with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


# Websocket close codes (private range 4000-4999, mirroring HTTP statuses).
CLOSE_PROTOCOL_ERROR = 4400
CLOSE_UNAUTHORIZED = 4401
CLOSE_SUPERSEDED = 4409
CLOSE_STANDBY = 4503  # the Edge is a standby (`edge.ha`): another Edge leads
CLOSE_REASONS: Mapping[int, str] = {
    CLOSE_PROTOCOL_ERROR: "protocol error",
    CLOSE_UNAUTHORIZED: "unauthorized",
    CLOSE_SUPERSEDED: "superseded by a newer session",
    CLOSE_STANDBY: "edge is a standby",
}

# ``run.event`` error codes the Node sends; upstream failures carry ``status`` when known.
ERROR_BAD_REQUEST = "bad_request"
ERROR_NODE_DRAINING = "node_draining"
ERROR_NODE_NOT_READY = "node_not_ready"
ERROR_DEADLINE_EXCEEDED = "deadline_exceeded"
ERROR_UPSTREAM_UNAVAILABLE = "upstream_unavailable"
ERROR_UPSTREAM_TIMEOUT = "upstream_timeout"
ERROR_UPSTREAM = "upstream_error"
ERROR_INTERNAL = "internal_error"
# The run's output went past a limit: a frame too large even in parts (Node), or more than the
# Edge takes for one run (IOP_MAX_RUN_OUTPUT_BYTES).
ERROR_OUTPUT_TOO_LARGE = "output_too_large"


# An upstream's non-2xx answer, as an `upstream_error` message: its status, then its own words.
def upstream_error_message(status: int, message: str) -> str:
    return f"upstream HTTP {status}: {message}"


def upstream_words(status: int, message: str) -> str:
    """The upstream's own message inside an `upstream_error` message (the message if none)."""
    return message.removeprefix(upstream_error_message(status, ""))


class Hello(TypedDict):
    type: Literal["hello"]
    protocol: int
    node_id: str
    agent_version: str


# ``decode`` only checks that ``node`` is an object; the Node checks the rest with
# ``parse_node_config`` before it applies anything.
class Config(TypedDict):
    type: Literal["config"]
    revision: str
    node: NodePayload
    # What the Edge takes beyond protocol 1's frames (``FEATURES``); absent from older Edges.
    features: NotRequired[list[str]]


class ConfigRefresh(TypedDict):
    type: Literal["config.refresh"]
    refresh_id: str
    revision: str
    node: NodePayload


class ConfigAck(TypedDict):
    type: Literal["config.ack"]
    revision: str
    refresh_id: str | None
    status: Literal["applied", "rejected"]
    error: str | None


class ProviderHealthEntry(TypedDict):
    healthy: bool
    detail: str


class ProviderHealth(TypedDict):
    type: Literal["provider.health"]
    providers: dict[str, ProviderHealthEntry]


# The OpenAI endpoint a run is for; ``request`` is that endpoint's body.
Endpoint = Literal["chat.completions", "completions", "embeddings", "responses"]
ENDPOINTS: tuple[Endpoint, ...] = ("chat.completions", "completions", "embeddings", "responses")
# The endpoints whose streams are made of chunks with an ``id`` and a ``model`` (``relay_as``).
CHUNK_ENDPOINTS: frozenset[Endpoint] = frozenset({"chat.completions", "completions"})
# What a run.request without ``endpoint`` (from an Edge older than the field) is for.
DEFAULT_ENDPOINT: Endpoint = "chat.completions"


class RelayAs(TypedDict):
    """What a streamed run's chunks carry as its caller gets them: the answer's id, and the
    model as the caller named it."""

    id: str
    model: str


class RunRequest(TypedDict):
    type: Literal["run.request"]
    run_id: str
    provider_id: str
    adapter_id: str
    target: str
    request: dict[str, Any]
    deadline: float
    endpoint: NotRequired[Endpoint]  # absent: DEFAULT_ENDPOINT
    # A streamed chat or completions run: the Node sends each chunk with this id and model, as
    # the JSON text the caller gets (``chunk`` events). Absent: ``delta`` events, as sent.
    relay_as: NotRequired[RelayAs]


class Usage(TypedDict):
    """OpenAI's usage object; the upstream's detail objects travel along when it sends them."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: NotRequired[dict[str, Any]]
    completion_tokens_details: NotRequired[dict[str, Any]]


class DoneData(TypedDict):
    usage: Usage
    finish_reason: str
    # True when a relayed delta already carried the finish_reason (the upstream's own closing
    # chunk); otherwise the Edge writes the closing chunk itself.
    finish_sent: NotRequired[bool]


class ChunkData(TypedDict):
    # One chunk's JSON text on one line, its id and model as relay_as says, without usage.
    text: str


class ErrorData(TypedDict):
    code: str
    message: str
    status: NotRequired[int | None]  # the upstream's HTTP status, when it answered with one
    retry_after: NotRequired[float | None]  # seconds, from the upstream's Retry-After
    upstream_code: NotRequired[
        str | None
    ]  # the upstream's own error code, e.g. context_length_exceeded


class RunEvent(TypedDict):
    type: Literal["run.event"]
    run_id: str
    event: Literal["delta", "chunk", "response", "done", "error"]
    # delta: one streamed event as the upstream sent it (a chat.completion.chunk or
    # text_completion chunk, usage lifted into `done`; a Responses API event as is);
    # chunk: ChunkData, such a chunk as the caller gets it (the run.request's relay_as);
    # response: the whole non-streamed answer as the upstream sent it (a chat.completion,
    # text_completion, embeddings list or Response object); done: DoneData; error: ErrorData
    data: Mapping[str, Any]


class RunCancel(TypedDict):
    type: Literal["run.cancel"]
    run_id: str


class Error(TypedDict):
    """Edge -> Node: why the Edge refused a frame (diagnostics; not in the DESIGN §5 table)."""

    type: Literal["error"]
    code: str
    message: str


class Part(TypedDict):
    """A slice of the encoded text of a frame too large for one (``run.request``, ``run.event``).

    The parts of one frame go out in order, the last with ``more: false``; the receiver joins
    their ``data`` and decodes the result as the frame it is.
    """

    type: Literal["part"]
    run_id: str
    data: str
    more: bool


class Batch(TypedDict):
    """Node -> Edge, once the Edge's ``config`` lists ``"batch"``: frames written together.

    Each item is the JSON text of one frame, exactly as it would travel alone (a ``part`` too,
    never another batch); the receiver takes them in order, as if they had come one by one.
    """

    type: Literal["batch"]
    frames: list[str]


class Ping(TypedDict):
    type: Literal["ping"]
    ts: NotRequired[float | None]


class Pong(TypedDict):
    type: Literal["pong"]
    ts: NotRequired[float | None]


Frame = (
    Hello
    | Config
    | ConfigRefresh
    | ConfigAck
    | ProviderHealth
    | RunRequest
    | RunEvent
    | RunCancel
    | Error
    | Part
    | Batch
    | Ping
    | Pong
)

NODE_TO_EDGE = frozenset(
    {"hello", "config.ack", "provider.health", "run.event", "part", "batch", "ping", "pong"}
)
# What a batch may hold: every frame a Node sends, but another batch.
BATCHED_NODE_TO_EDGE = NODE_TO_EDGE - {"batch"}
EDGE_TO_NODE = frozenset(
    {"config", "config.refresh", "run.request", "run.cancel", "error", "part", "ping", "pong"}
)
FRAME_TYPES = NODE_TO_EDGE | EDGE_TO_NODE
# The frames that may travel in parts, by the side that receives them.
SPLIT_NODE_TO_EDGE = frozenset({"run.event"})
SPLIT_EDGE_TO_NODE = frozenset({"run.request"})


def hello(node_id: str, agent_version: str) -> Hello:
    return {
        "type": "hello",
        "protocol": PROTOCOL_VERSION,
        "node_id": node_id,
        "agent_version": agent_version,
    }


# Features: what one side takes beyond protocol 1's frames, named in its frames so that either
# side may be the newer one. "batch": the Edge takes ``batch`` frames.
FEATURE_BATCH = "batch"
MAX_FEATURES = 16
# A batch's frames: at most this many, and this many characters of frame text together (escaped
# as JSON strings, at most twice as long; in UTF-8, the batch stays far within MAX_FRAME_BYTES).
MAX_BATCH_FRAMES = 1024
MAX_BATCH_CHARS = 128 * 1024


def config(revision: str, node: NodePayload, *, features: list[str] | None = None) -> Config:
    frame: Config = {"type": "config", "revision": revision, "node": node}
    if features:
        frame["features"] = features
    return frame


def config_refresh(refresh_id: str, revision: str, node: NodePayload) -> ConfigRefresh:
    return {"type": "config.refresh", "refresh_id": refresh_id, "revision": revision, "node": node}


def config_ack(
    revision: str, *, refresh_id: str | None = None, error: str | None = None
) -> ConfigAck:
    """An ack: ``applied`` without ``error``, ``rejected`` with it."""
    return {
        "type": "config.ack",
        "revision": revision,
        "refresh_id": refresh_id,
        "status": "applied" if error is None else "rejected",
        "error": None if error is None else clip(error, MAX_MESSAGE_CHARS),
    }


def provider_health(providers: Mapping[str, tuple[bool, str]]) -> ProviderHealth:
    return {
        "type": "provider.health",
        "providers": {
            pid: {"healthy": healthy, "detail": clip(detail, MAX_DETAIL_CHARS)}
            for pid, (healthy, detail) in providers.items()
        },
    }


def run_request(
    run_id: str,
    provider_id: str,
    adapter_id: str,
    target: str,
    request: dict[str, Any],
    deadline: float,
    *,
    endpoint: Endpoint = DEFAULT_ENDPOINT,
    relay_as: RelayAs | None = None,
) -> RunRequest:
    frame: RunRequest = {
        "type": "run.request",
        "run_id": run_id,
        "provider_id": provider_id,
        "adapter_id": adapter_id,
        "target": target,
        "request": request,
        "deadline": deadline,
        "endpoint": endpoint,
    }
    if relay_as is not None:
        frame["relay_as"] = relay_as
    return frame


def endpoint_of(frame: RunRequest) -> Endpoint:
    """The endpoint a decoded ``run.request`` is for."""
    return frame.get("endpoint", DEFAULT_ENDPOINT)


def run_delta(run_id: str, chunk: dict[str, Any]) -> RunEvent:
    return {"type": "run.event", "run_id": run_id, "event": "delta", "data": chunk}


def run_chunk(run_id: str, text: str) -> RunEvent:
    """A chunk as its caller gets it (``relay_as``): ``text`` is its JSON on one line."""
    data: ChunkData = {"text": text}
    return {"type": "run.event", "run_id": run_id, "event": "chunk", "data": data}


def run_response(run_id: str, completion: dict[str, Any]) -> RunEvent:
    return {"type": "run.event", "run_id": run_id, "event": "response", "data": completion}


def run_done(
    run_id: str, usage: Usage, finish_reason: str, *, finish_sent: bool = False
) -> RunEvent:
    data: DoneData = {"usage": usage, "finish_reason": clip(finish_reason, MAX_CODE_CHARS)}
    if finish_sent:
        data["finish_sent"] = True
    return {"type": "run.event", "run_id": run_id, "event": "done", "data": data}


def run_error(
    run_id: str,
    code: str,
    message: str,
    status: int | None = None,
    *,
    retry_after: float | None = None,
    upstream_code: str | None = None,
) -> RunEvent:
    data: ErrorData = {"code": code, "message": clip(message, MAX_MESSAGE_CHARS), "status": status}
    if retry_after is not None:
        data["retry_after"] = retry_after
    if upstream_code is not None:
        data["upstream_code"] = upstream_code
    return {"type": "run.event", "run_id": run_id, "event": "error", "data": data}


class RunError(Exception):
    """A run that ended in an error, with what a `run.event` error carries (``ErrorData``):
    ``code`` (an ``ERROR_*`` code), ``status`` (the upstream's HTTP status), ``retry_after``
    (seconds, the upstream's ``Retry-After``) and ``upstream_code`` (the upstream's own code).
    The Node raises it from its adapters; the Edge rebuilds it from the event."""

    def __init__(
        self,
        code: str,
        message: str,
        status: int | None = None,
        *,
        retry_after: float | None = None,
        upstream_code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.retry_after = retry_after
        self.upstream_code = upstream_code

    def event(self, run_id: str) -> RunEvent:
        return run_error(
            run_id,
            self.code,
            self.message,
            self.status,
            retry_after=self.retry_after,
            upstream_code=self.upstream_code,
        )


def run_cancel(run_id: str) -> RunCancel:
    return {"type": "run.cancel", "run_id": run_id}


def error(code: str, message: str) -> Error:
    return {"type": "error", "code": code, "message": clip(message, MAX_MESSAGE_CHARS)}


def ping(ts: float | None = None) -> Ping:
    return {"type": "ping", "ts": ts}


def pong(ts: float | None = None) -> Pong:
    return {"type": "pong", "ts": ts}
