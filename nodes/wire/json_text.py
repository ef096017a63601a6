"""JSON on the hot path: orjson where it gives the standard library's answer, the library otherwise.

Every streamed token is decoded and encoded a few times on its way (an upstream's SSE line, the
Node's frame, the Edge's frame, the caller's SSE event); orjson does each in a fifth to a tenth
of the time (docs/benchmarks.md). Where the two could differ, the standard library decides:

- text orjson refuses (a lone surrogate, ``NaN``, UTF-16, nesting past 1,024) goes to ``json``,
  which answers as it always did, errors included;
- orjson reads an integer past 64 bits as a float, so text with a run of 19 or more digits is
  read by ``json`` (such a run is almost always in a string, and costs only speed);
- a value orjson cannot write (a lone surrogate, an integer past 64 bits, a key that is not a
  string) is written by ``json``.

Written text is compact (no spaces) and keeps non-ASCII characters as they are. A non-finite
float (which only a ``NaN`` in text read here can produce) is written as ``null``: valid JSON,
where the standard library would write the bare ``NaN`` no JSON parser need accept.

"""

from __future__ import annotations

import json
from typing import Any

import orjson

# Every digit read as 0, then a search for nineteen of them: a few passes of C over the bytes
# (a regular expression for the same thing costs ten times as much on a large batch frame).
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_RUN = b"0" * 19


def read_exactly(text: str | bytes) -> bool:
    """Whether orjson reads every number of ``text`` as the standard library does: no run of 19
    digits, so no integer past 64 bits."""
    data = text if isinstance(text, bytes) else text.encode(errors="surrogatepass")
    return data.translate(_DIGITS_AS_ZERO).find(_LONG_RUN) < 0


def loads(text: str | bytes) -> Any:
    """``json.loads(text)``, faster."""
    if read_exactly(text):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass  # the standard library answers, or raises its own error
    return json.loads(text)


def loads_inexact(text: str | bytes) -> Any:
    """``loads(text)`` but for integers past 64 bits, which may come out as floats: for a caller
    that looks at what it got first, and reads it again with ``loads`` where numbers matter
    (``read_exactly``). It skips the pass over the text that ``loads`` makes first."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def dumps_bytes(value: Any) -> bytes:
    """``value`` as compact JSON in valid UTF-8 (a lone surrogate escaped, as ``\\ud800``)."""
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError: what only the standard library writes
        pass
    return json.dumps(value, separators=(",", ":")).encode()


def dumps_bytes_to_hold(value: Any) -> bytes:
    """``dumps_bytes`` for bytes held a while (a request body, for as long as its stream runs).

    orjson's bytes keep the buffer they were written in, at least 4 KB and up to ten times the
    text: 2,000 bodies of 100 bytes held 8.3 MB, their copies 0.3 MB (docs/benchmarks.md).
    """
    return memoryview(dumps_bytes(value)).tobytes()


def dumps(value: Any) -> str:
    """``value`` as compact JSON text, non-ASCII characters kept (lone surrogates too)."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        pass
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
