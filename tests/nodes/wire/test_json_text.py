"""The hot path's JSON gives the standard library's answers: the same values read, the same
errors raised, and text that reads back as the value written."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest

from nodes.wire import json_text

READ_ALIKE = [
    b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}',
    b'{"a": 1, "a": 2}',  # the last duplicate wins, as in json
    b'{"big": 123456789012345678901234567890}',  # past 64 bits: an int, not a float
    b'{"negative": -9999999999999999999}',
    b'{"max": 18446744073709551615, "min": -9223372036854775808}',
    b'{"t": NaN, "u": Infinity}',  # not JSON, but json takes it, and so must this
    b'{"s": "\\ud800"}',  # a lone surrogate escape
    b'{"e": "\xc3\xa9", "f": 1.5e-7}',
    '{"text": "é"}'.encode("utf-16"),  # json detects UTF-16 from the bytes
    b"  [1, 2.0, true, null]  ",
]


@pytest.mark.parametrize("raw", READ_ALIKE)
def test_it_reads_what_json_reads(raw: bytes) -> None:
    value = json_text.loads(raw)

    assert repr(value) == repr(json.loads(raw))  # repr: NaN == NaN, int stays int


@pytest.mark.parametrize("raw", READ_ALIKE)
def test_read_inexactly_it_reads_what_json_reads_wherever_read_exactly_says_so(
    raw: bytes,
) -> None:
    value = json_text.loads_inexact(raw)

    if json_text.read_exactly(raw):
        assert repr(value) == repr(json.loads(raw))
    else:  # an integer past 64 bits: the same value, give or take its last digits
        assert value == pytest.approx(json.loads(raw))


def test_read_exactly_finds_every_integer_past_64_bits() -> None:
    assert not json_text.read_exactly('{"n": 123456789012345678901234567890}')
    assert not json_text.read_exactly(b"[-9223372036854775809]")
    assert json_text.read_exactly('{"n": 123456789012345678, "s": "9999999999"}')  # 18 digits


@pytest.mark.parametrize("read", [json_text.loads, json_text.loads_inexact])
@pytest.mark.parametrize("raw", [b"", b"{", b'{"a": }', b"\xff", b"[1,]"])
def test_it_refuses_what_json_refuses_with_the_same_error(read: Any, raw: bytes) -> None:
    with pytest.raises(ValueError) as expected:
        json.loads(raw)
    with pytest.raises(type(expected.value)) as got:
        read(raw)

    assert str(got.value) == str(expected.value)


def test_it_reads_text_as_well_as_bytes() -> None:
    assert json_text.loads('{"a": "é", "n": 12345678901234567890123}') == {
        "a": "é",
        "n": 12345678901234567890123,
    }


WRITTEN = [
    {"id": "chatcmpl-1", "choices": [{"delta": {"content": "é ☃"}, "finish_reason": None}]},
    {"big": 2**70, "neg": -(2**65)},  # past 64 bits: written whole
    {"surrogate": "\ud800 text"},
    {1: "a key that is not a string"},
    [1.5, 1e16, -0.0, True, None, "x"],
]


@pytest.mark.parametrize("value", WRITTEN)
def test_what_it_writes_reads_back_as_json_writes_it(value: object) -> None:
    expected = json.loads(json.dumps(value))

    assert json.loads(json_text.dumps(value)) == expected
    assert json.loads(json_text.dumps_bytes(value)) == expected


def test_bytes_are_valid_utf8_with_a_lone_surrogate_escaped() -> None:
    written = json_text.dumps_bytes({"s": "\ud800", "e": "é"})

    assert written.decode() == '{"s":"\\ud800","e":"\\u00e9"}'


def test_text_is_compact_and_keeps_non_ascii() -> None:
    assert json_text.dumps({"a": "é", "b": [1, 2]}) == '{"a":"é","b":[1,2]}'
    assert json_text.dumps_bytes({"a": "é"}) == '{"a":"é"}'.encode()


def test_a_value_json_cannot_write_raises_as_json_does() -> None:
    with pytest.raises(TypeError):
        json_text.dumps({"a": object()})
    with pytest.raises(TypeError):
        json_text.dumps_bytes({"a": {1, 2}})


@pytest.mark.parametrize("content_chars", [20, 1_000, 50_000])
def test_bytes_to_hold_are_the_same_text_without_the_buffer_it_was_written_in(
    content_chars: int,
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * content_chars}]}
    tracemalloc.start()
    try:
        as_written = json_text.dumps_bytes(body)
        written_size, _ = tracemalloc.get_traced_memory()
        held = json_text.dumps_bytes_to_hold(body)
        held_size = tracemalloc.get_traced_memory()[0] - written_size
    finally:
        tracemalloc.stop()

    assert held == as_written
    assert held_size < len(held) + 100 < written_size
