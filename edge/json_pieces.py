"""JSON encoded in pieces, so a large document never holds the interpreter for one long call.

The standard library's C encoder runs a whole `dumps` without letting another thread in. Over a
fleet's refresh result (tens of thousands of changes, megabytes) that stopped the event loop for
hundreds of milliseconds while a thread wrote it. Taken apart a few levels down and encoded item
by item, the same text comes out of many short calls, and the interpreter switches threads
between them. Within ``edge.pacing.paced`` the pieces are paced too: between short calls, a
busy thread still makes the event loop wait for the interpreter at each of its socket calls.

A process with no event loop beside the work (the refresh plan worker) encodes whole
(``encode_whole_in_this_process``): there the pieces only cost time, three times the whole
encoding of a fleet-wide refresh result (133 against 42 ms at 3,000 nodes).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from edge.pacing import pace

_whole_in_this_process = False


def encode_whole_in_this_process() -> None:
    """From now on, ``json_pieces`` yields each document in one piece, in this process."""
    global _whole_in_this_process
    _whole_in_this_process = True


def json_pieces(
    data: Any, encoder: json.JSONEncoder, depth: int, whole: Callable[[Any], str] | None = None
) -> Iterator[str]:
    """``encoder.encode(data)`` in pieces: mappings and lists down to ``depth`` levels are taken
    apart, anything below them (or any other value) is encoded whole, by ``whole``
    (``encoder.encode`` unless given). The pieces join to exactly what ``whole(data)`` returns."""
    encode = whole or encoder.encode
    if (
        _whole_in_this_process
        or depth <= 0
        or not data
        or not isinstance(data, dict | list)
        or encoder.indent is not None
    ):
        yield encode(data)
    elif isinstance(data, dict):
        keys = sorted(data) if encoder.sort_keys else list(data)
        if not all(isinstance(key, str) for key in keys):
            yield encode(data)  # the encoder's own rules for other keys
            return
        for index, key in enumerate(keys):
            pace()
            yield ("{" if index == 0 else encoder.item_separator) + encode(key)
            yield encoder.key_separator
            yield from json_pieces(data[key], encoder, depth - 1, encode)
        yield "}"
    else:
        for index, item in enumerate(data):
            pace()
            yield "[" if index == 0 else encoder.item_separator
            yield from json_pieces(item, encoder, depth - 1, encode)
        yield "]"


class PiecewiseJSONEncoder(json.JSONEncoder):
    """A JSON encoder (for ``json.dumps(cls=...)``, a Django ``JSONField``, a DRF renderer) that
    writes documents in pieces down to ``depth`` levels; its text is the standard encoder's."""

    depth = 2

    def encode(self, o: Any) -> str:
        return "".join(json_pieces(o, self, self.depth, super().encode))
