"""Frames too large for one travel in several ``part`` frames (docs/wire.md, "Large payloads").

The sender encodes the frame and cuts the text into slices small enough that each slice's part
frame, once JSON-escaped and UTF-8 encoded, stays within ``MAX_FRAME_BYTES``; it sends them in
order. The receiver joins the slices of each run, up to ``MAX_MESSAGE_BYTES``, and decodes the
result as the frame it is. Only a run's own frames are split: ``run.request`` (Edge to Node) and
``run.event`` (Node to Edge), so parts are keyed by run id.
"""

from __future__ import annotations

import json
from typing import Any, cast

from nodes.wire.codec import FrameError, decode, encode, utf8_size
from nodes.wire.frames import (
    MAX_FRAME_BYTES,
    MAX_MESSAGE_BYTES,
    SPLIT_EDGE_TO_NODE,
    SPLIT_NODE_TO_EDGE,
    Frame,
    Part,
)

SPLITTABLE = SPLIT_EDGE_TO_NODE | SPLIT_NODE_TO_EDGE
_LAST_TAIL = ',"more":false}'
_MORE_TAIL = ',"more":true}'
# The slice of a part must have room for a few characters, whatever they escape to.
_MIN_BUDGET = 64


def split(
    frame: Frame, *, max_bytes: int = MAX_FRAME_BYTES, max_message_bytes: int = MAX_MESSAGE_BYTES
) -> list[str]:
    """The texts to send for ``frame``: its encoding when that fits one frame, else its parts.

    Raises ``FrameError`` (``too_large``) for a frame over ``max_bytes`` that may not be split,
    or one over ``max_message_bytes``, before anything is sent.
    """
    text = encode(frame)
    # A character is at most 4 UTF-8 bytes: only measure when the cheap bound is inconclusive.
    if len(text) * 4 <= max_bytes:
        return [text]
    size = utf8_size(text)
    if size <= max_bytes:
        return [text]
    kind = frame["type"]
    if kind not in SPLITTABLE:
        raise FrameError("too_large", f"a {kind} frame of {size} bytes exceeds {max_bytes} bytes")
    if size > max_message_bytes:
        raise FrameError(
            "too_large",
            f"{kind} of {size} bytes exceeds the {max_message_bytes}-byte message limit",
        )
    return _parts(frame["run_id"], text, max_bytes)  # type: ignore[typeddict-item]


def _parts(run_id: str, text: str, max_bytes: int) -> list[str]:
    head = '{"type":"part","run_id":' + json.dumps(run_id, ensure_ascii=False) + ',"data":'
    budget = max_bytes - utf8_size(head) - len(_LAST_TAIL)
    if budget < _MIN_BUDGET:
        raise FrameError("too_large", "the run id leaves no room for a part's data")
    parts = []
    start = 0
    while start < len(text):
        take = min(budget, len(text) - start)
        while True:
            # Escaping (`"` and `\` double) and UTF-8 (up to 4 bytes a character) grow a slice:
            # shrink it in proportion until its part fits.
            piece = json.dumps(text[start : start + take], ensure_ascii=False)
            cost = utf8_size(piece)
            if cost <= budget:
                break
            take = min(take - 1, take * budget // cost)
        start += take
        parts.append(head + piece + (_MORE_TAIL if start < len(text) else _LAST_TAIL))
    return parts


class Reassembler:
    """The parts received so far of each run's unfinished frame."""

    def __init__(self, max_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._pieces: dict[str, list[str]] = {}
        self._sizes: dict[str, int] = {}
        self._refused: set[str] = set()  # past the limit: the rest of that frame's parts go too

    def add(self, part: Part) -> str | None:
        """Take one part; the frame's whole text once its last part is in, else None.

        Raises ``FrameError`` (``too_large``) once, when a frame grows past ``max_bytes``: what
        it had is dropped, and so are its remaining parts as they arrive.
        """
        run_id, more = part["run_id"], part["more"]
        if run_id in self._refused:
            if not more:
                self._refused.discard(run_id)
            return None
        size = self._sizes.get(run_id, 0) + utf8_size(part["data"])
        if size > self.max_bytes:
            self.discard(run_id)
            if more:
                self._refused.add(run_id)
            raise FrameError("too_large", f"a frame in parts exceeds {self.max_bytes} bytes")
        pieces = self._pieces.setdefault(run_id, [])
        pieces.append(part["data"])
        if more:
            self._sizes[run_id] = size
            return None
        del self._pieces[run_id]
        self._sizes.pop(run_id, None)
        return "".join(pieces)

    def take(self, part: Part, accept: frozenset[str]) -> Frame | None:
        """``add``, then decode the whole text as a frame of ``accept`` for the part's run.

        Raises ``FrameError`` for a frame that is bad once put together.
        """
        text = self.add(part)
        if text is None:
            return None
        frame = decode(text, max_bytes=self.max_bytes, accept=accept)
        if cast("dict[str, Any]", frame).get("run_id") != part["run_id"]:
            raise FrameError(
                "bad_field",
                f"{frame['type']}: sent in parts for run {part['run_id']!r}, names another run",
                "run_id",
            )
        return frame

    def discard(self, run_id: str) -> None:
        """Forget a run's unfinished frame: the run ended, or its sender gave the frame up."""
        if self._pieces.pop(run_id, None) is not None:
            self._sizes.pop(run_id, None)
        self._refused.discard(run_id)

    def __len__(self) -> int:
        """How many runs have a frame half-received."""
        return len(self._pieces)
