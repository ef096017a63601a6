"""Large frames in parts: every part fits a frame, the parts make the frame again, limits hold."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodes import wire

USAGE: wire.Usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def request_with(content: str, run_id: str = "r1") -> wire.RunRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": content}]}
    return wire.run_request(run_id, "p1", "echo", "m", body, 1700000000.5)


def response_with(content: str, run_id: str = "r1") -> wire.RunEvent:
    completion = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
    }
    return wire.run_response(run_id, completion)


def rejoin(texts: list[str], accept: frozenset[str]) -> wire.Frame | None:
    """Receive ``texts`` as a peer would: decode each, put parts back together."""
    parts = wire.Reassembler()
    whole = None
    for text in texts:
        frame = wire.decode(text, accept=wire.FRAME_TYPES)
        assert frame["type"] == "part"
        whole = parts.take(frame, accept)
    return whole


def sizes(texts: list[str]) -> list[int]:
    return [len(text.encode()) for text in texts]


def test_a_frame_that_fits_goes_as_it_is() -> None:
    frame = wire.run_delta("r1", {"choices": [{"delta": {"content": "hi"}}]})

    assert wire.split(frame) == [wire.encode(frame)]


# Content that grows when escaped into a part (quotes, backslashes, escapes of control
# characters) or in UTF-8 (2, 3 and 4 bytes a character).
CONTENTS = {
    "ascii": "a" * (3 * 1024 * 1024),
    "quotes and backslashes": '"\\' * (1024 * 1024),
    "control characters": "\x01\n\t" * (400 * 1024),
    "two-byte": "é" * (2 * 1024 * 1024),
    "cjk": "漢" * (1024 * 1024),
    "emoji": "😀" * (1024 * 1024),
    "mixed": ('a"é\\漢😀\x00' * 300 * 1024),
}


@pytest.mark.parametrize("content", CONTENTS.values(), ids=CONTENTS.keys())
def test_a_large_run_request_goes_in_parts_that_each_fit_a_frame(content: str) -> None:
    frame = request_with(content)

    texts = wire.split(frame)

    assert len(texts) > 1
    assert max(sizes(texts)) <= wire.MAX_FRAME_BYTES
    assert rejoin(texts, wire.SPLIT_EDGE_TO_NODE) == frame


def test_a_large_answer_goes_in_parts_too() -> None:
    frame = response_with("😀 big answer " * 200_000)

    texts = wire.split(frame)

    assert max(sizes(texts)) <= wire.MAX_FRAME_BYTES
    assert rejoin(texts, wire.SPLIT_NODE_TO_EDGE) == frame


def test_parts_are_as_large_as_the_frame_limit_allows() -> None:
    texts = wire.split(request_with("a" * (3 * 1024 * 1024)))

    # Plain ASCII barely grows: the parts are full, not a quarter full.
    assert min(sizes(texts[:-1])) > wire.MAX_FRAME_BYTES - 64


@given(st.text(min_size=1, max_size=2000))
def test_any_text_splits_into_parts_under_any_frame_limit(content: str) -> None:
    frame = request_with(content)
    limit = 200

    texts = wire.split(frame, max_bytes=limit)

    assert max(sizes(texts)) <= limit
    if len(texts) == 1:
        assert wire.decode(texts[0]) == frame
    else:
        assert rejoin(texts, wire.SPLIT_EDGE_TO_NODE) == frame


def test_a_body_at_the_body_limit_fits_the_message_limit() -> None:
    body_text = "x" * (wire.MAX_BODY_BYTES - 1024)  # a whole body of JSON, nearly at the limit

    texts = wire.split(request_with(body_text))

    assert rejoin(texts, wire.SPLIT_EDGE_TO_NODE) == request_with(body_text)
    assert wire.MAX_MESSAGE_BYTES > wire.MAX_BODY_BYTES
    assert wire.MAX_FRAME_BYTES < wire.MAX_SOCKET_MESSAGE_BYTES < wire.MAX_MESSAGE_BYTES


def test_a_frame_over_the_message_limit_is_refused_before_anything_is_sent() -> None:
    with pytest.raises(wire.FrameError) as caught:
        wire.split(request_with("x" * 2000), max_bytes=500, max_message_bytes=1000)

    assert caught.value.code == "too_large"
    assert "1000-byte message limit" in caught.value.message


def test_only_a_runs_own_frames_may_travel_in_parts() -> None:
    node: dict[str, Any] = {"id": "node-a", "padding": "x" * 2000}
    frame = wire.config("sha256:abc", node)  # type: ignore[arg-type]

    with pytest.raises(wire.FrameError) as caught:
        wire.split(frame, max_bytes=500)

    assert caught.value.code == "too_large"
    assert "config frame" in caught.value.message


def test_parts_of_several_runs_interleave() -> None:
    first, second = request_with("one " * 300, "r1"), request_with("two " * 300, "r2")
    parts = wire.Reassembler()
    firsts = [wire.decode(t) for t in wire.split(first, max_bytes=300)]
    seconds = [wire.decode(t) for t in wire.split(second, max_bytes=300)]
    done: list[wire.Frame] = []

    for one, two in zip(firsts, seconds, strict=True):
        for part in (one, two):
            assert part["type"] == "part"
            if (frame := parts.take(part, wire.SPLIT_EDGE_TO_NODE)) is not None:
                done.append(frame)

    assert done == [first, second]
    assert len(parts) == 0


def part(run_id: str, data: str, more: bool) -> wire.Part:
    return {"type": "part", "run_id": run_id, "data": data, "more": more}


def test_a_frame_growing_past_the_message_limit_is_refused_once_and_its_parts_dropped() -> None:
    parts = wire.Reassembler(max_bytes=10)
    assert parts.add(part("r1", "12345", True)) is None

    with pytest.raises(wire.FrameError) as caught:
        parts.add(part("r1", "678901", True))

    assert caught.value.code == "too_large"
    assert parts.add(part("r1", "more of it", True)) is None  # the rest goes quietly
    assert parts.add(part("r1", "its end", False)) is None
    assert len(parts) == 0
    # The run's next frame starts afresh.
    assert parts.add(part("r1", "next", False)) == "next"


def test_the_limit_counts_utf8_bytes() -> None:
    parts = wire.Reassembler(max_bytes=10)

    with pytest.raises(wire.FrameError):
        parts.add(part("r1", "😀😀😀", False))  # 3 characters, 12 bytes


def test_a_discarded_run_forgets_its_unfinished_frame() -> None:
    parts = wire.Reassembler()
    parts.add(part("r1", '{"type":', True))

    parts.discard("r1")

    assert len(parts) == 0
    assert parts.add(part("r1", '{"type":"run.cancel","run_id":"r1"}', False)) is not None


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ('{"type":"run.cancel","run_id":"r1"}', "unexpected_type"),
        (json.dumps(part("r1", "x", False)), "unexpected_type"),  # no parts inside parts
        ('{"type":"run.request","run_id":"r1"}', "missing_field"),
        ("{not json", "not_json"),
        (wire.encode(request_with("hi", "r2")), "bad_field"),  # names another run
    ],
)
def test_parts_that_make_a_bad_frame_are_refused(text: str, code: str) -> None:
    with pytest.raises(wire.FrameError) as caught:
        wire.Reassembler().take(part("r1", text, False), wire.SPLIT_EDGE_TO_NODE)

    assert caught.value.code == code


@pytest.mark.parametrize(
    ("frame", "code", "field"),
    [
        ({"type": "part", "run_id": "r1", "data": "x"}, "missing_field", "more"),
        ({"type": "part", "run_id": "r1", "data": "x", "more": 1}, "bad_field", "more"),
        ({"type": "part", "run_id": "", "data": "x", "more": False}, "bad_field", "run_id"),
        ({"type": "part", "run_id": "r1", "data": 7, "more": False}, "bad_field", "data"),
    ],
)
def test_a_malformed_part_names_its_field(frame: dict[str, Any], code: str, field: str) -> None:
    with pytest.raises(wire.FrameError) as caught:
        wire.decode(json.dumps(frame))

    assert (caught.value.code, caught.value.field) == (code, field)


def test_a_lone_surrogate_is_escaped_so_the_frame_can_travel() -> None:
    frame = request_with("broken \ud800 pair")

    text = wire.encode(frame)

    text.encode()  # valid UTF-8, unlike the raw surrogate
    assert wire.decode(text) == frame
    assert wire.encode(request_with("é")) == json.dumps(
        request_with("é"), separators=(",", ":"), ensure_ascii=False
    )


@pytest.mark.parametrize(
    ("text", "run_id"),
    [
        ('{"type": "run.event", "run_id": "r1", "event": 3}', "r1"),
        ('{"type": "part", "run_id": "r1"}', "r1"),
        ('{"type": "hello", "run_id": "r1"}', None),  # not a run's frame
        ('{"type": "run.event", "run_id": ""}', None),
        ('{"type": ["run.event"], "run_id": "r1"}', None),
        ("[1]", None),
        ("not json", None),
    ],
)
def test_it_reads_which_run_a_bad_frame_names(text: str, run_id: str | None) -> None:
    assert wire.run_id_of(text, frozenset({"run.event", "part"})) == run_id
    assert wire.run_id_of(text.encode(), frozenset({"run.event", "part"})) is None  # binary


def test_it_measures_utf8_sizes() -> None:
    assert wire.utf8_size("abc") == 3
    assert wire.utf8_size("é😀") == 6
    assert wire.utf8_size("\ud800") == 3


def test_done_frames_stay_whole() -> None:
    frame = wire.run_done("r1", USAGE, "stop")

    assert wire.split(frame, max_bytes=4096) == [wire.encode(frame)]
