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
