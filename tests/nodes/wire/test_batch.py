"""`batch` frames and `features` (docs/wire.md): checked in the codec like every other field."""

from __future__ import annotations

import pytest

from nodes import wire
from nodes.wire import json_text

PING = wire.encode(wire.ping(1.0))
DELTA = wire.encode(wire.run_delta("run-1", {"choices": []}))


def test_a_batch_carries_frames_as_their_own_text() -> None:
    frame = wire.decode(wire.batch_text([PING, DELTA]), accept=wire.NODE_TO_EDGE)

    assert frame == {"type": "batch", "frames": [PING, DELTA]}
    assert [wire.decode(t, accept=wire.BATCHED_NODE_TO_EDGE)["type"] for t in frame["frames"]] == [
        "ping",
        "run.event",
    ]


@pytest.mark.parametrize(
    ("frames", "kind"),
    [
        ([], "a list of 1 to 1024 frames, each as JSON text"),
        ([{"type": "ping"}], "a list of 1 to 1024 frames, each as JSON text"),
        ("ping", "a list of 1 to 1024 frames, each as JSON text"),
        ([PING] * (wire.MAX_BATCH_FRAMES + 1), "a list of 1 to 1024 frames, each as JSON text"),
    ],
)
def test_a_batch_of_anything_but_frame_texts_is_refused_naming_the_field(
    frames: object, kind: str
) -> None:
    text = json_text.dumps({"type": "batch", "frames": frames})

    with pytest.raises(wire.FrameError) as refused:
        wire.decode(text, accept=wire.NODE_TO_EDGE)

    assert (refused.value.code, refused.value.field) == ("bad_field", "frames")
    assert refused.value.message == f"batch: field 'frames' must be {kind}"


BIG = 123456789012345678901234567890  # past 64 bits


def test_a_frame_in_a_batch_keeps_an_integer_past_64_bits_whole() -> None:
    # The batch is read without the check for such integers (it holds only strings); each of
    # its frames is read with it.
    inner = wire.encode(wire.run_delta("run-1", {"choices": [], "n": BIG}))
    batch = wire.decode(wire.batch_text([PING, inner]), accept=wire.NODE_TO_EDGE)

    frame = wire.decode(batch["frames"][1], accept=wire.BATCHED_NODE_TO_EDGE)

    assert frame["data"]["n"] == BIG  # type: ignore[typeddict-item]
    assert type(frame["data"]["n"]) is int  # type: ignore[typeddict-item]


def test_a_frame_that_only_begins_as_a_batch_keeps_its_integers_whole() -> None:
    # The last of duplicate keys wins, in JSON as here: this is a run.event.
    text = (
        '{"type":"batch","frames":["x"],"type":"run.event","run_id":"r1","event":"delta",'
        f'"data":{{"n":{BIG}}}}}'
    )

    frame = wire.decode(text, accept=wire.NODE_TO_EDGE)

    assert frame["type"] == "run.event"
    assert type(frame["data"]["n"]) is int  # type: ignore[typeddict-item]
    assert frame["data"]["n"] == BIG  # type: ignore[typeddict-item]


def test_a_batch_inside_a_batch_is_refused() -> None:
    inner = wire.batch_text([PING])

    with pytest.raises(wire.FrameError) as refused:
        wire.decode(inner, accept=wire.BATCHED_NODE_TO_EDGE)

    assert refused.value.code == "unexpected_type"


def test_the_edge_sends_no_batch_and_the_node_takes_none() -> None:
    with pytest.raises(wire.FrameError) as refused:
        wire.decode(wire.batch_text([PING]), accept=wire.EDGE_TO_NODE)

    assert refused.value.code == "unexpected_type"


def test_a_config_names_its_features_or_leaves_them_out() -> None:
    node = {"id": "node-a", "adapters": [], "providers": []}

    assert "features" not in wire.config("sha256:1", node)  # type: ignore[arg-type]
    frame = wire.decode(
        wire.encode(wire.config("sha256:1", node, features=["batch"])),  # type: ignore[arg-type]
        accept=wire.EDGE_TO_NODE,
    )
    assert frame["features"] == ["batch"]


@pytest.mark.parametrize("features", ["batch", [1], [""], ["x" * 65], ["f"] * 17])
def test_bad_features_are_refused_naming_the_field(features: object) -> None:
    frame = {"type": "config", "revision": "r", "node": {}, "features": features}
    text = json_text.dumps(frame)

    with pytest.raises(wire.FrameError) as refused:
        wire.decode(text, accept=wire.EDGE_TO_NODE)

    assert (refused.value.code, refused.value.field) == ("bad_field", "features")
