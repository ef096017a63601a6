"""EventSplitter: the data of each server-sent event, however the body is cut into chunks."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodes.agent.adapters import sse
from nodes.agent.adapters.base import AdapterError
from nodes.agent.adapters.sse import EventSplitter

BODY = (
    b": a comment\r\n"
    b"event: ignored\r\n"
    b'data: {"a": 1}\r\n'
    b"\r\n"
    b"data:first line\n"
    b"data: second line\n"
    b"id: 7\n"
    b"\n"
    b"\n"
    b"data: caf\xc3\xa9 \xe2\x82\xac\n"
    b"\n"
    b"data: [DONE]"
)
EVENTS = ['{"a": 1}', "first line\nsecond line", "café €", "[DONE]"]


def split_at(body: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(body), *(cut % (len(body) + 1) for cut in cuts)})
    return [body[start:end] for start, end in itertools.pairwise(points)]


def events_of(chunks: list[bytes]) -> list[str]:
    splitter = EventSplitter()
    events = [event for chunk in chunks for event in splitter.feed(chunk)]
    return events + splitter.end()


def test_it_reads_a_body_in_one_chunk() -> None:
    assert events_of([BODY]) == EVENTS


@given(st.lists(st.integers(min_value=0, max_value=10_000), max_size=20))
def test_it_reads_the_same_events_however_the_body_is_cut(cuts: list[int]) -> None:
    assert events_of(split_at(BODY, cuts)) == EVENTS


def test_an_event_comes_out_with_the_chunk_that_ends_it() -> None:
    splitter = EventSplitter()
    assert splitter.feed(b"data: one\n") == []
    assert splitter.feed(b"\ndata: tw") == ["one"]
    assert splitter.feed(b"o\n\n") == ["two"]
    assert splitter.end() == []


def test_a_line_over_the_limit_fails_even_before_it_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sse, "MAX_EVENT_LINE_BYTES", 10)
    splitter = EventSplitter()
    splitter.feed(b"data: 1234")
    with pytest.raises(AdapterError) as caught:
        splitter.feed(b"5")
    assert caught.value.code == "output_too_large"
    assert caught.value.message == "upstream sent an event line over 10 bytes"
    with pytest.raises(AdapterError):
        EventSplitter().feed(b"data: 12345\n\n")
