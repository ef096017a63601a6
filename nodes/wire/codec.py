"""Encoding and checking wire frames.

This is on the hot path (every streamed token crosses it twice), so the checks are hand-written
dict lookups, not a validation library. A decoded frame is the parsed dict itself. Unknown extra
keys are ignored, so either side can add optional fields later.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any, TypeGuard, cast

from nodes.wire import json_text
from nodes.wire.frames import (
    ENDPOINTS,
    FRAME_TYPES,
    MAX_BATCH_FRAMES,
    MAX_CODE_CHARS,
    MAX_DETAIL_CHARS,
    MAX_FEATURES,
    MAX_FRAME_BYTES,
    MAX_HEALTH_PROVIDERS,
    MAX_ID_CHARS,
    MAX_MESSAGE_CHARS,
    MAX_REVISION_CHARS,
    MAX_VERSION_CHARS,
    PROTOCOL_VERSION,
    Frame,
    clip,
)


class FrameError(Exception):
    """A frame that cannot be used. ``code`` is machine-readable; ``field`` names the culprit."""

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field


def encode(frame: Frame) -> str:
    text = json_text.dumps(frame)
    if not text.isascii():  # O(1) in CPython: only non-ASCII text pays for the check below
        try:
            text.encode()
        except UnicodeEncodeError:
            # A lone surrogate (from a JSON "\ud800" a caller or upstream sent) has no UTF-8
            # form, so no websocket can carry it raw: escaped, the peer decodes the same value.
            return json.dumps(frame, separators=(",", ":"))
    return text


def utf8_size(text: str) -> int:
    """The UTF-8 size of ``text``; a lone surrogate (text joined from a peer's parts may hold
    one) counts three bytes instead of raising."""
    if text.isascii():
        return len(text)
    return len(text.encode(errors="surrogatepass"))


_Check = Callable[[Any], bool]


def _is_str(value: Any) -> TypeGuard[str]:
    return type(value) is str


def _matcher(pattern: str) -> _Check:
    match = re.compile(pattern).fullmatch
    return lambda value: type(value) is str and match(value) is not None


def _at_most(limit: int) -> _Check:
    return lambda value: type(value) is str and len(value) <= limit


# No whitespace, control characters or lone surrogates: an id is shown in logs and JSON as is.
_is_id = _matcher(rf"[^\s\x00-\x1f\ud800-\udfff]{{1,{MAX_ID_CHARS}}}")
_is_code = _matcher(rf"[^\s\x00-\x1f\ud800-\udfff]{{1,{MAX_CODE_CHARS}}}")
_is_revision = _matcher(rf"[A-Za-z0-9:._+-]{{1,{MAX_REVISION_CHARS}}}")
_is_version = _matcher(rf"[!-~]{{1,{MAX_VERSION_CHARS}}}")  # printable ASCII
_is_message = _at_most(MAX_MESSAGE_CHARS)
_is_detail = _at_most(MAX_DETAIL_CHARS)
_is_model_name = _at_most(MAX_ID_CHARS)  # a caller's name for a model, as the Edge serves it
_is_short = _at_most(MAX_CODE_CHARS)  # an upstream's own words for a code or finish reason
_SHORT_KIND = f"a string of at most {MAX_CODE_CHARS} characters"

# Bounds that keep a Node's numbers inside the metering columns.
MAX_TOKEN_COUNT = 2**31 - 1


def _is_int(value: Any) -> TypeGuard[int]:
    return type(value) is int  # bool is an int subclass; a JSON true is not a count


def _is_number(value: Any) -> bool:
    # json.loads takes NaN and Infinity, which are no time and no count.
    return type(value) is int or (type(value) is float and math.isfinite(value))


def _is_bool(value: Any) -> TypeGuard[bool]:
    return type(value) is bool


def _is_object(value: Any) -> bool:
    return type(value) is dict


def _is_features(value: Any) -> bool:
    return (
        type(value) is list
        and len(value) <= MAX_FEATURES
        and all(type(name) is str and 0 < len(name) <= MAX_CODE_CHARS for name in value)
    )


def _is_frame_texts(value: Any) -> bool:
    return (
        type(value) is list
        and 0 < len(value) <= MAX_BATCH_FRAMES
        and all(type(text) is str for text in value)
    )


def _is_endpoint(value: Any) -> bool:
    return type(value) is str and value in ENDPOINTS


def _is_http_status(value: Any) -> bool:
    return type(value) is int and 100 <= value <= 599


def _or_null(check: _Check) -> _Check:
    return lambda value: value is None or check(value)


_ID_KIND = f"an id (1 to {MAX_ID_CHARS} characters, no whitespace or control characters)"
_KIND: dict[_Check, str] = {
    _is_str: "a string",
    _is_id: _ID_KIND,
    _is_code: f"a code (1 to {MAX_CODE_CHARS} characters, no whitespace or control characters)",
    _is_revision: f"a revision (1 to {MAX_REVISION_CHARS} of A-Z a-z 0-9 : . _ + -)",
    _is_version: f"a version (1 to {MAX_VERSION_CHARS} printable ASCII characters)",
    _is_message: f"a string of at most {MAX_MESSAGE_CHARS} characters",
    _is_detail: f"a string of at most {MAX_DETAIL_CHARS} characters",
    _is_model_name: f"a string of at most {MAX_ID_CHARS} characters",
    _is_int: "an integer",
    _is_number: "a finite number",
    _is_bool: "a boolean",
    _is_object: "an object",
    _is_endpoint: "one of " + ", ".join(repr(e) for e in ENDPOINTS),
    _is_features: f"a list of at most {MAX_FEATURES} names of 1 to {MAX_CODE_CHARS} characters",
    _is_frame_texts: f"a list of 1 to {MAX_BATCH_FRAMES} frames, each as JSON text",
}

# type -> (field, check, what it must be, required)
_Field = tuple[str, _Check, str, bool]


def _field(name: str, check: _Check, *, required: bool = True, nullable: bool = False) -> _Field:
    kind = _KIND[check]
    if nullable:
        return (name, _or_null(check), f"{kind} or null", required)
    return (name, check, kind, required)


# Every field of every frame, its type and its bound, in one place; free-form payloads (``node``,
# ``request``, a delta's ``data``) are bounded by the frame size and checked by their own parsers.
_SCHEMA: dict[str, tuple[_Field, ...]] = {
    "hello": (
        _field("protocol", _is_int),
        _field("node_id", _is_id),
        _field("agent_version", _is_version),
    ),
    "config": (
        _field("revision", _is_revision),
        _field("node", _is_object),
        _field("features", _is_features, required=False),
    ),
    "config.refresh": (
        _field("refresh_id", _is_id),
        _field("revision", _is_revision),
        _field("node", _is_object),
    ),
    "config.ack": (
        _field("revision", _is_revision),
        _field("refresh_id", _is_id, required=False, nullable=True),
        _field("status", _is_str),
        _field("error", _is_message, required=False, nullable=True),
    ),
    "provider.health": (_field("providers", _is_object),),
    "run.request": (
        _field("run_id", _is_id),
        _field("provider_id", _is_id),
        _field("adapter_id", _is_id),
        _field("target", _is_id),
        _field("request", _is_object),
        _field("deadline", _is_number),
        _field("endpoint", _is_endpoint, required=False),
        _field("relay_as", _is_object, required=False),
    ),
    "run.event": (
        _field("run_id", _is_id),
        _field("event", _is_str),
        _field("data", _is_object),
    ),
    "run.cancel": (_field("run_id", _is_id),),
    "error": (_field("code", _is_code), _field("message", _is_message)),
    "part": (_field("run_id", _is_id), _field("data", _is_str), _field("more", _is_bool)),
    "batch": (_field("frames", _is_frame_texts),),
    "ping": (_field("ts", _is_number, required=False, nullable=True),),
    "pong": (_field("ts", _is_number, required=False, nullable=True),),
}

_USAGE_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens")


def decode(
    text: str | bytes,
    *,
    max_bytes: int = MAX_FRAME_BYTES,
    accept: frozenset[str] = FRAME_TYPES,
) -> Frame:
    """Parse and check one frame; raise ``FrameError`` naming what is wrong.

    ``accept`` limits the frame types this side takes (``EDGE_TO_NODE`` on the Node,
    ``NODE_TO_EDGE`` on the Edge); anything else is ``unexpected_type``.
    """
    if not isinstance(text, str):
        raise FrameError("not_text", "frames must be JSON text frames, got a binary frame")
    # A character is at most 4 UTF-8 bytes: only encode when the cheap bound is inconclusive.
    if len(text) > max_bytes or (len(text) * 4 > max_bytes and utf8_size(text) > max_bytes):
        raise FrameError("too_large", f"frame exceeds {max_bytes} bytes")
    try:
        frame = _parse(text)
    except ValueError as exc:
        raise FrameError("not_json", f"frame is not valid JSON: {exc}") from None
    if type(frame) is not dict:
        raise FrameError("not_object", "frame must be a JSON object")
    frame_type = frame.get("type")
    if frame_type == "run.event" and "run.event" in accept and _is_relayed_event(frame):
        return cast("Frame", frame)
    if frame_type is None:
        raise FrameError("missing_field", "frame has no 'type'", "type")
    if type(frame_type) is not str or frame_type not in _SCHEMA:
        raise FrameError("unknown_type", f"unknown frame type {_shown(frame_type)}", "type")
    if frame_type not in accept:
        raise FrameError(
            "unexpected_type", f"frame type {frame_type!r} is not accepted here", "type"
        )
    for name, check, kind, required in _SCHEMA[frame_type]:
        if name not in frame:
            if required:
                raise FrameError("missing_field", f"{frame_type}: missing field '{name}'", name)
            continue
        if not check(frame[name]):
            raise _bad(frame_type, name, kind)
    _check_nested(frame_type, frame)
    return cast("Frame", frame)


def _parse(text: str) -> Any:
    """The JSON value of a frame's text.

    A batch holds nothing but strings (its frames' texts, each read again on its own), and so
    does a run's ``chunk`` (the caller's chunk as text), so an integer past 64 bits in them
    cannot matter: they skip ``json_text``'s check for one, a pass over the largest texts there
    are (230 ns for each frame a batch holds, and a third of the time a chunk takes).
    """
    value = json_text.loads_inexact(text)
    if type(value) is dict:
        kind = value.get("type")
        if kind == "batch" or (kind == "run.event" and value.get("event") == "chunk"):
            return value
    return value if json_text.read_exactly(text) else json_text.loads(text)


def _is_relayed_event(frame: dict[str, Any]) -> bool:
    """A run's ``delta``, ``chunk`` or ``response``, well formed: most of the frames there are,
    settled in a few lookups. Anything else, or anything in doubt, goes through the schema,
    which names what is wrong."""
    event = frame.get("event")
    run_id = frame.get("run_id")
    data = frame.get("data")
    return (
        type(data) is dict
        and (event == "delta" or event == "response" or (event == "chunk" and _is_chunk(data)))
        and type(run_id) is str
        and 0 < len(run_id) <= MAX_ID_CHARS
        # What _is_id takes, narrowed to printable ASCII without the space: no expression.
        and run_id.isascii()
        and run_id.isprintable()
        and " " not in run_id
    )


def _is_chunk(data: dict[str, Any]) -> bool:
    """A ``chunk``'s data: its text one line of a JSON object, which the Edge writes as one
    server-sent event's data (a line break in it would end the event early)."""
    text = data.get("text")
    return (
        type(text) is str
        and text.startswith("{")
        and text.endswith("}")
        and "\n" not in text
        and "\r" not in text
    )


def batch_text(texts: list[str]) -> str:
    """The ``batch`` frame of frames already encoded (``encode``, ``split``), as JSON text."""
    return '{"type":"batch","frames":' + json_text.dumps(texts) + "}"


def run_id_of(text: str | bytes, types: frozenset[str]) -> str | None:
    """The run a frame that failed ``decode`` names, if one of ``types`` and readable that far:
    so that only that run is refused."""
    if not isinstance(text, str):
        return None
    try:
        frame = json.loads(text)
    except ValueError:
        return None
    if type(frame) is not dict or type(frame.get("type")) is not str:
        return None
    run_id = frame.get("run_id")
    return run_id if frame["type"] in types and _is_id(run_id) else None


def _shown(value: Any) -> str:
    """A peer's value as an error message may quote it: short, whatever the peer sent."""
    return clip(repr(value), 40)


def _bad(frame_type: str, field: str, kind: str) -> FrameError:
    return FrameError("bad_field", f"{frame_type}: field '{field}' must be {kind}", field)


def _check_nested(frame_type: str, frame: dict[str, Any]) -> None:
    if frame_type == "run.event":
        _check_run_event(frame["event"], frame["data"])
    elif frame_type == "run.request":
        if "relay_as" in frame:
            _check_relay_as(frame["relay_as"])
    elif frame_type == "hello":
        if frame["protocol"] != PROTOCOL_VERSION:
            raise FrameError(
                "unsupported_protocol",
                f"hello: protocol {_shown(frame['protocol'])} is not supported "
                f"(speaks {PROTOCOL_VERSION})",
                "protocol",
            )
    elif frame_type == "config.ack":
        if frame["status"] not in ("applied", "rejected"):
            raise _bad("config.ack", "status", "'applied' or 'rejected'")
        if frame["status"] == "rejected" and not frame.get("error"):
            raise _bad("config.ack", "error", "a reason when status is 'rejected'")
    elif frame_type == "provider.health":
        providers = frame["providers"]
        if len(providers) > MAX_HEALTH_PROVIDERS:
            raise _bad(frame_type, "providers", f"at most {MAX_HEALTH_PROVIDERS} providers")
        for pid, entry in providers.items():
            if not _is_id(pid):  # checked first: the field names below quote it
                raise _bad(frame_type, "providers", f"keyed by provider ids, each {_ID_KIND}")
            if type(entry) is not dict:
                raise _bad(frame_type, f"providers.{pid}", "an object")
            if not _is_bool(entry.get("healthy")):
                raise _bad(frame_type, f"providers.{pid}.healthy", "a boolean")
            if not _is_detail(entry.get("detail")):
                raise _bad(frame_type, f"providers.{pid}.detail", _KIND[_is_detail])


def _check_relay_as(relay_as: dict[str, Any]) -> None:
    if not _is_id(relay_as.get("id")):
        raise _bad("run.request", "relay_as.id", _ID_KIND)
    if not _is_model_name(relay_as.get("model")):
        raise _bad("run.request", "relay_as.model", _KIND[_is_model_name])


def _check_run_event(event: str, data: dict[str, Any]) -> None:
    if event == "delta" or event == "response":
        return  # an OpenAI chat.completion(.chunk), relayed as is
    if event == "chunk":
        if not _is_chunk(data):
            raise _bad("run.event", "data.text", "one line of JSON text, an object")
        return
    if event == "done":
        usage = data.get("usage")
        if type(usage) is not dict:
            raise _bad("run.event", "data.usage", "an object")
        for name in _USAGE_FIELDS:
            count = usage.get(name)
            if not _is_int(count) or not 0 <= count <= MAX_TOKEN_COUNT:
                raise _bad("run.event", f"data.usage.{name}", "a token count (0 to 2**31 - 1)")
        if not _is_short(data.get("finish_reason")):
            raise _bad("run.event", "data.finish_reason", _SHORT_KIND)
        if not _is_bool(data.get("finish_sent", False)):
            raise _bad("run.event", "data.finish_sent", "a boolean")
        return
    if event == "error":
        if not _is_code(data.get("code")):
            raise _bad("run.event", "data.code", _KIND[_is_code])
        if not _is_message(data.get("message")):
            raise _bad("run.event", "data.message", _KIND[_is_message])
        status = data.get("status")
        if status is not None and not _is_http_status(status):
            raise _bad("run.event", "data.status", "an HTTP status (100 to 599) or null")
        retry_after = data.get("retry_after")
        if retry_after is not None and not (_is_number(retry_after) and retry_after >= 0):
            raise _bad("run.event", "data.retry_after", "a number of seconds >= 0 or null")
        upstream_code = data.get("upstream_code")
        if upstream_code is not None and not _is_short(upstream_code):
            raise _bad("run.event", "data.upstream_code", f"{_SHORT_KIND} or null")
        return
    raise _bad("run.event", "event", "'delta', 'chunk', 'response', 'done' or 'error'")
