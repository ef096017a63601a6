from __future__ import annotations

import json
from typing import Any

import pytest

from nodes import wire

USAGE: wire.Usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
CHUNK = {
    "id": "chatcmpl-1",
    "object": "chat.completion.chunk",
    "created": 1,
    "model": "m",
    "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}],
}

EVERY_FRAME: list[wire.Frame] = [
    wire.hello("node-a", "0.1.0"),
    wire.config("sha256:abc", {"id": "node-a", "adapters": [], "providers": []}),
    wire.config_refresh("ref-1", "sha256:def", {"id": "node-a"}),
    wire.config_ack("sha256:abc"),
    wire.config_ack("sha256:def", refresh_id="ref-1", error="node.id: wrong"),
    wire.provider_health({"p1": (True, "ok"), "p2": (False, "HTTP 500")}),
    wire.run_request("r1", "p1", "echo", "m", {"model": "m", "messages": []}, 1700000000.5),
    wire.run_delta("r1", CHUNK),
    wire.run_request(
        "r1", "p1", "echo", "m", {"stream": True}, 1.5, relay_as={"id": "c-1", "model": "my m"}
    ),
    wire.run_chunk("r1", json.dumps(CHUNK)),
    wire.run_done("r1", USAGE, "stop"),
    wire.run_error("r1", "upstream_error", "upstream HTTP 503: busy", 503),
    wire.run_error("r1", "node_draining", "node is draining"),
    wire.run_cancel("r1"),
    wire.error("unknown_run", "no run 'r9' on this session"),
    wire.ping(12.5),
    wire.pong(12.5),
    wire.ping(),
]


@pytest.mark.parametrize("frame", EVERY_FRAME, ids=lambda f: f["type"])
def test_it_round_trips_every_frame_type(frame: wire.Frame) -> None:
    assert wire.decode(wire.encode(frame)) == frame


def test_it_builds_frames_with_the_design_fields() -> None:
    assert wire.hello("n", "1") == {
        "type": "hello",
        "protocol": 1,
        "node_id": "n",
        "agent_version": "1",
    }
    assert wire.config_ack("rev", refresh_id="r") == {
        "type": "config.ack",
        "revision": "rev",
        "refresh_id": "r",
        "status": "applied",
        "error": None,
    }
    assert wire.config_ack("rev", error="bad")["status"] == "rejected"
    assert wire.provider_health({"p": (True, "ok")})["providers"] == {
        "p": {"healthy": True, "detail": "ok"}
    }
    assert wire.run_done("r", USAGE, "length")["data"] == {
        "usage": USAGE,
        "finish_reason": "length",
    }


def test_it_accepts_a_config_ack_without_refresh_id() -> None:
    text = json.dumps({"type": "config.ack", "revision": "r", "status": "applied", "error": None})
    assert wire.decode(text)["type"] == "config.ack"


def test_it_ignores_unknown_extra_keys() -> None:
    text = json.dumps({"type": "run.cancel", "run_id": "r1", "reason": "client gone"})
    assert wire.decode(text)["run_id"] == "r1"  # type: ignore[typeddict-item]


_DROP = object()


def _with(frame: wire.Frame, **changes: Any) -> str:
    data: dict[str, Any] = {**frame, **changes}
    return json.dumps({k: v for k, v in data.items() if v is not _DROP})


REQUEST = wire.run_request("r1", "p1", "echo", "m", {"messages": []}, 1.0)
DONE = wire.run_done("r1", USAGE, "stop")
ERROR = wire.run_error("r1", "bad_request", "nope")
HEALTH = wire.provider_health({"p1": (True, "ok")})


@pytest.mark.parametrize(
    ("text", "code", "field"),
    [
        ("not json", "not_json", None),
        ("[1, 2]", "not_object", None),
        ('{"run_id": "r1"}', "missing_field", "type"),
        ('{"type": "run.explode"}', "unknown_type", "type"),
        ('{"type": 7}', "unknown_type", "type"),
        (_with(wire.hello("n", "1"), protocol=2), "unsupported_protocol", "protocol"),
        (_with(wire.hello("n", "1"), protocol=True), "bad_field", "protocol"),
        (_with(wire.hello("n", "1"), node_id=_DROP), "missing_field", "node_id"),
        (_with(wire.hello("n", "1"), node_id=""), "bad_field", "node_id"),
        (_with(wire.config("r", {}), node=[]), "bad_field", "node"),
        (_with(wire.config_refresh("x", "r", {}), refresh_id=_DROP), "missing_field", "refresh_id"),
        (_with(wire.config_ack("r"), status="done"), "bad_field", "status"),
        (_with(wire.config_ack("r"), status="rejected"), "bad_field", "error"),
        (_with(wire.config_ack("r"), refresh_id=5), "bad_field", "refresh_id"),
        (_with(HEALTH, providers=[]), "bad_field", "providers"),
        (_with(HEALTH, providers={"p1": True}), "bad_field", "providers.p1"),
        (
            _with(HEALTH, providers={"p1": {"healthy": 1, "detail": ""}}),
            "bad_field",
            "providers.p1.healthy",
        ),
        (_with(HEALTH, providers={"p1": {"healthy": True}}), "bad_field", "providers.p1.detail"),
        (_with(REQUEST, run_id=_DROP), "missing_field", "run_id"),
        (_with(REQUEST, provider_id=3), "bad_field", "provider_id"),
        (_with(REQUEST, adapter_id=_DROP), "missing_field", "adapter_id"),
        (_with(REQUEST, target=""), "bad_field", "target"),
        (_with(REQUEST, request="hi"), "bad_field", "request"),
        (_with(REQUEST, deadline="soon"), "bad_field", "deadline"),
        (_with(REQUEST, deadline=True), "bad_field", "deadline"),
        (_with(DONE, event="finished"), "bad_field", "event"),
        (_with(DONE, data=None), "bad_field", "data"),
        (_with(DONE, data={"finish_reason": "stop"}), "bad_field", "data.usage"),
        (
            _with(DONE, data={"usage": {**USAGE, "total_tokens": 5.5}, "finish_reason": "stop"}),
            "bad_field",
            "data.usage.total_tokens",
        ),
        (
            _with(DONE, data={"usage": USAGE, "finish_reason": None}),
            "bad_field",
            "data.finish_reason",
        ),
        (
            _with(DONE, data={"usage": {**USAGE, "prompt_tokens": -1}, "finish_reason": "stop"}),
            "bad_field",
            "data.usage.prompt_tokens",
        ),
        (
            _with(
                DONE, data={"usage": {**USAGE, "completion_tokens": 2**31}, "finish_reason": "x"}
            ),
            "bad_field",
            "data.usage.completion_tokens",
        ),
        (_with(ERROR, data={"message": "x"}), "bad_field", "data.code"),
        (_with(ERROR, data={"code": "c" * 65, "message": "m"}), "bad_field", "data.code"),
        (_with(ERROR, data={"code": "x", "message": 1}), "bad_field", "data.message"),
        (
            _with(ERROR, data={"code": "x", "message": "m", "status": "500"}),
            "bad_field",
            "data.status",
        ),
        (_with(wire.run_cancel("r"), run_id=None), "bad_field", "run_id"),
        (_with(wire.ping(), ts="now"), "bad_field", "ts"),
        (_with(wire.error("x", "m"), code=""), "bad_field", "code"),
        (_with(wire.error("x", "m"), message=_DROP), "missing_field", "message"),
    ],
)
def test_it_names_what_is_wrong_with_a_frame(text: str, code: str, field: str | None) -> None:
    with pytest.raises(wire.FrameError) as caught:
        wire.decode(text)
    assert caught.value.code == code
    assert caught.value.field == field
    if field is not None:
        assert field in caught.value.message


ACK = wire.config_ack("sha256:abc", refresh_id="rf-1")
REJECTED = wire.config_ack("sha256:abc", error="node.id: wrong")
HELLO = wire.hello("node-a", "0.1.0")
REFRESH = wire.config_refresh("rf-1", "sha256:abc", {})


def _error_data(**changes: Any) -> dict[str, Any]:
    return {"code": "upstream_error", "message": "m", "status": 503, **changes}


def _health(pid: str = "p1", detail: str = "ok") -> dict[str, Any]:
    return {pid: {"healthy": True, "detail": detail}}


# (frame, field, a value at its bound, a value past it): every bounded field of every frame.
BOUNDS: list[tuple[wire.Frame, str, Any, Any]] = [
    (HELLO, "node_id", "n" * wire.MAX_ID_CHARS, "n" * (wire.MAX_ID_CHARS + 1)),
    (HELLO, "agent_version", "v" * wire.MAX_VERSION_CHARS, "v" * (wire.MAX_VERSION_CHARS + 1)),
    (ACK, "revision", "r" * wire.MAX_REVISION_CHARS, "r" * (wire.MAX_REVISION_CHARS + 1)),
    (ACK, "refresh_id", "f" * wire.MAX_ID_CHARS, "f" * (wire.MAX_ID_CHARS + 1)),
    (REJECTED, "error", "e" * wire.MAX_MESSAGE_CHARS, "e" * (wire.MAX_MESSAGE_CHARS + 1)),
    (REFRESH, "refresh_id", "f" * wire.MAX_ID_CHARS, "f" * (wire.MAX_ID_CHARS + 1)),
    (REFRESH, "revision", "r" * wire.MAX_REVISION_CHARS, "r" * (wire.MAX_REVISION_CHARS + 1)),
    (REQUEST, "run_id", "r" * wire.MAX_ID_CHARS, "r" * (wire.MAX_ID_CHARS + 1)),
    (REQUEST, "provider_id", "p" * wire.MAX_ID_CHARS, "p" * (wire.MAX_ID_CHARS + 1)),
    (REQUEST, "adapter_id", "a" * wire.MAX_ID_CHARS, "a" * (wire.MAX_ID_CHARS + 1)),
    (REQUEST, "target", "t" * wire.MAX_ID_CHARS, "t" * (wire.MAX_ID_CHARS + 1)),
    (DONE, "run_id", "r" * wire.MAX_ID_CHARS, "r" * (wire.MAX_ID_CHARS + 1)),
    (wire.run_cancel("r1"), "run_id", "r" * wire.MAX_ID_CHARS, "r" * (wire.MAX_ID_CHARS + 1)),
    (wire.error("x", "m"), "code", "c" * wire.MAX_CODE_CHARS, "c" * (wire.MAX_CODE_CHARS + 1)),
    (
        wire.error("x", "m"),
        "message",
        "m" * wire.MAX_MESSAGE_CHARS,
        "m" * (wire.MAX_MESSAGE_CHARS + 1),
    ),
]


@pytest.mark.parametrize(("frame", "field", "at_bound", "past_bound"), BOUNDS)
def test_every_field_is_bounded_and_one_past_its_bound_is_named(
    frame: wire.Frame, field: str, at_bound: Any, past_bound: Any
) -> None:
    wire.decode(_with(frame, **{field: at_bound}))
    with pytest.raises(wire.FrameError) as caught:
        wire.decode(_with(frame, **{field: past_bound}))
    assert (caught.value.code, caught.value.field) == ("bad_field", field)
    assert len(caught.value.message) < 200  # it names the field, never quotes the value


# (frame, nested field, data at its bound, data past it): the bounds inside objects.
NESTED_BOUNDS: list[tuple[wire.Frame, str, str, dict[str, Any], dict[str, Any]]] = [
    (
        HEALTH,
        "providers",
        "providers",
        {f"p{i}": {"healthy": True, "detail": ""} for i in range(wire.MAX_HEALTH_PROVIDERS)},
        {f"p{i}": {"healthy": True, "detail": ""} for i in range(wire.MAX_HEALTH_PROVIDERS + 1)},
    ),
    (
        HEALTH,
        "providers",
        "providers",
        _health("p" * wire.MAX_ID_CHARS),
        _health("p" * (wire.MAX_ID_CHARS + 1)),
    ),
    (
        HEALTH,
        "providers",
        "providers.p1.detail",
        _health(detail="d" * wire.MAX_DETAIL_CHARS),
        _health(detail="d" * (wire.MAX_DETAIL_CHARS + 1)),
    ),
    (
        ERROR,
        "data",
        "data.code",
        _error_data(code="c" * wire.MAX_CODE_CHARS),
        _error_data(code="c" * (wire.MAX_CODE_CHARS + 1)),
    ),
    (
        ERROR,
        "data",
        "data.message",
        _error_data(message="m" * wire.MAX_MESSAGE_CHARS),
        _error_data(message="m" * (wire.MAX_MESSAGE_CHARS + 1)),
    ),
    (
        ERROR,
        "data",
        "data.upstream_code",
        _error_data(upstream_code="u" * wire.MAX_CODE_CHARS),
        _error_data(upstream_code="u" * (wire.MAX_CODE_CHARS + 1)),
    ),
    (ERROR, "data", "data.status", _error_data(status=599), _error_data(status=600)),
    (ERROR, "data", "data.status", _error_data(status=100), _error_data(status=10**300)),
    (
        DONE,
        "data",
        "data.finish_reason",
        {"usage": USAGE, "finish_reason": "f" * wire.MAX_CODE_CHARS},
        {"usage": USAGE, "finish_reason": "f" * (wire.MAX_CODE_CHARS + 1)},
    ),
]


@pytest.mark.parametrize(("frame", "key", "field", "at_bound", "past_bound"), NESTED_BOUNDS)
def test_every_nested_field_is_bounded_and_one_past_its_bound_is_named(
    frame: wire.Frame, key: str, field: str, at_bound: Any, past_bound: Any
) -> None:
    wire.decode(_with(frame, **{key: at_bound}))
    with pytest.raises(wire.FrameError) as caught:
        wire.decode(_with(frame, **{key: past_bound}))
    assert (caught.value.code, caught.value.field) == ("bad_field", field)
    assert len(caught.value.message) < 200


@pytest.mark.parametrize(
    ("frame", "field", "odd"),
    [
        (ACK, "revision", "\ud800"),
        (ACK, "revision", "sha256:abc def"),
        (ACK, "revision", "sha256:<script>"),
        (ACK, "revision", ""),
        (ACK, "refresh_id", "rf 1"),
        (HELLO, "node_id", "node\na"),
        (HELLO, "agent_version", "0.1 beta"),
        (HELLO, "agent_version", ""),
        (REQUEST, "run_id", "r\u0000"),
        (REQUEST, "target", "\udfff"),
        (REQUEST, "deadline", float("nan")),
        (REQUEST, "deadline", float("inf")),
        (wire.ping(1.0), "ts", float("-inf")),
    ],
)
def test_it_refuses_odd_values_of_ids_revisions_and_numbers(
    frame: wire.Frame, field: str, odd: Any
) -> None:
    with pytest.raises(wire.FrameError) as caught:
        wire.decode(_with(frame, **{field: odd}))
    assert (caught.value.code, caught.value.field) == ("bad_field", field)


def test_a_huge_frame_type_is_named_short() -> None:
    with pytest.raises(wire.FrameError) as caught:
        wire.decode(json.dumps({"type": "x" * 100_000}))
    assert caught.value.code == "unknown_type"
    assert len(caught.value.message) < 100


def test_the_builders_clip_free_text_so_a_peers_own_frames_always_pass() -> None:
    long = "x" * 100_000
    frames: list[wire.Frame] = [
        wire.config_ack("sha256:abc", error=long),
        wire.provider_health({"p1": (False, long)}),
        wire.run_error("r1", "upstream_error", long),
        wire.run_done("r1", USAGE, long),
        wire.error("bad_field", long),
    ]
    for frame in frames:
        wire.decode(wire.encode(frame))
    assert wire.clip("abcdef", 4) == "abc\u2026"
    assert wire.clip("abcd", 4) == "abcd"


def test_it_refuses_a_frame_over_the_size_limit() -> None:
    text = wire.encode(wire.run_delta("r1", {"content": "x" * 2000}))
    with pytest.raises(wire.FrameError) as caught:
        wire.decode(text, max_bytes=1024)
    assert caught.value.code == "too_large"


def test_it_counts_the_size_limit_in_utf8_bytes() -> None:
    text = wire.encode(wire.run_cancel("é" * 400))  # ~400 characters, ~800 bytes
    assert len(text) < 512
    with pytest.raises(wire.FrameError, match="exceeds 512 bytes"):
        wire.decode(text, max_bytes=512)


def test_it_refuses_binary_frames() -> None:
    with pytest.raises(wire.FrameError) as caught:
        wire.decode(wire.encode(wire.ping()).encode())
    assert caught.value.code == "not_text"


def test_it_refuses_frame_types_the_receiving_side_does_not_take() -> None:
    with pytest.raises(wire.FrameError) as caught:
        wire.decode(wire.encode(wire.run_cancel("r1")), accept=wire.NODE_TO_EDGE)
    assert caught.value.code == "unexpected_type"


def test_it_splits_frame_types_by_direction() -> None:
    assert wire.NODE_TO_EDGE | wire.EDGE_TO_NODE == wire.FRAME_TYPES
    assert "error" in wire.EDGE_TO_NODE
    both_ways = wire.NODE_TO_EDGE & wire.EDGE_TO_NODE
    assert both_ways == {"part", "ping", "pong"}


def test_it_names_the_close_codes() -> None:
    assert (wire.CLOSE_PROTOCOL_ERROR, wire.CLOSE_UNAUTHORIZED, wire.CLOSE_SUPERSEDED) == (
        4400,
        4401,
        4409,
    )
    assert wire.CLOSE_REASONS[4401] == "unauthorized"
    assert wire.MAX_FRAME_BYTES == 1024 * 1024
    assert wire.PROTOCOL_VERSION == 1


def _outcome(text: str) -> tuple[str, str | None] | str:
    try:
        wire.decode(text)
    except wire.FrameError as exc:
        return (exc.code, exc.field)
    return "taken"


@pytest.mark.parametrize(
    "run_id",
    [
        "r1",
        "r" * wire.MAX_ID_CHARS,
        "r" * (wire.MAX_ID_CHARS + 1),
        "",
        "r 1",
        "r\t1",
        "r\u0000",
        "r\u007f",  # taken by the schema, not by the quick look at deltas
        "r\u00a0",  # a no-break space is whitespace
        "rün",
        "\ud800",
        5,
        None,
    ],
)
def test_a_delta_takes_and_refuses_the_run_ids_every_other_frame_does(run_id: Any) -> None:
    # Deltas are settled in a few lookups before the schema (codec._is_relayed_event).
    delta = _with(wire.run_delta("r", {"choices": []}), run_id=run_id)
    cancel = _with(wire.run_cancel("r"), run_id=run_id)

    assert _outcome(delta) == _outcome(cancel)


@pytest.mark.parametrize("event", ["delta", "response"])
@pytest.mark.parametrize("data", [[], "x", None, 1])
def test_a_delta_or_response_without_an_object_is_refused_naming_data(
    event: str, data: Any
) -> None:
    text = json.dumps({"type": "run.event", "run_id": "r1", "event": event, "data": data})

    assert _outcome(text) == ("bad_field", "data")


def test_the_delta_run_ids_hold_for_chunks_too() -> None:
    for run_id in ("r1", "", "r 1", "\ud800", 5):
        chunk = _with(wire.run_chunk("r", '{"choices":[]}'), run_id=run_id)
        cancel = _with(wire.run_cancel("r"), run_id=run_id)
        assert _outcome(chunk) == _outcome(cancel)


@pytest.mark.parametrize(
    "text",
    [
        '{"choices":[]}\n\ndata: {"injected":true}',  # would end the caller's event early
        '{"choices":[]}\r',
        "[1, 2]",
        "",
        None,
        {"choices": []},
    ],
)
def test_a_chunk_must_be_one_line_of_a_json_object(text: Any) -> None:
    frame = {"type": "run.event", "run_id": "r1", "event": "chunk", "data": {"text": text}}

    assert _outcome(json.dumps(frame)) == ("bad_field", "data.text")


def test_a_chunks_text_keeps_long_numbers_exact() -> None:
    text = '{"id":"x","choices":[],"seed":123456789012345678901234567890}'
    frame = wire.decode(wire.encode(wire.run_chunk("r1", text)))

    assert frame["data"]["text"] == text


@pytest.mark.parametrize(
    ("relay_as", "field"),
    [
        ({"model": "m"}, "relay_as.id"),
        ({"id": "has space", "model": "m"}, "relay_as.id"),
        ({"id": "c-1"}, "relay_as.model"),
        ({"id": "c-1", "model": "m" * (wire.MAX_ID_CHARS + 1)}, "relay_as.model"),
        ("c-1", "relay_as"),
    ],
)
def test_a_relay_as_is_an_answer_id_and_a_model_name(relay_as: Any, field: str) -> None:
    with pytest.raises(wire.FrameError) as caught:
        wire.decode(_with(REQUEST, relay_as=relay_as))

    assert (caught.value.code, caught.value.field) == ("bad_field", field)
