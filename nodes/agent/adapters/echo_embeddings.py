"""Echo's embeddings: a vector per input, derived from the sha256 of its text.

The bytes of ``sha256(text)``, then of ``sha256`` of that digest, and so on, give one byte per
dimension; byte ``b`` maps to ``b / 127.5 - 1`` (in [-1, 1]), and the vector is scaled to unit
length, then rounded to float32 (what OpenAI serves). The same input always gets the same vector,
so a test can compute the one it expects with ``echo_embedding``.
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from collections.abc import Iterable
from typing import Any

from nodes import wire
from nodes.agent.adapters.base import AdapterError, positive_int
from nodes.agent.adapters.inputs import text_inputs

DEFAULT_DIMENSIONS = 8
MAX_DIMENSIONS = 4096  # above every served model's size; bounds the work one input costs
MAX_INPUTS = 2048  # OpenAI's own limit per request


def echo_embedding(text: str, dimensions: int = DEFAULT_DIMENSIONS) -> list[float]:
    digest = hashlib.sha256(text.encode(errors="surrogatepass")).digest()
    stream = bytearray(digest)
    while len(stream) < dimensions:
        digest = hashlib.sha256(digest).digest()
        stream += digest
    values = [b / 127.5 - 1 for b in stream[:dimensions]]
    norm = math.sqrt(sum(v * v for v in values))  # never 0: no byte maps to 0
    return list(struct.unpack(f"<{dimensions}f", _float32(v / norm for v in values)))


def _float32(values: Iterable[float]) -> bytes:
    values = list(values)
    return struct.pack(f"<{len(values)}f", *values)


def embeddings_answer(request: dict[str, Any], target: str) -> tuple[dict[str, Any], int]:
    """The embeddings ``list`` for ``request``, and its input tokens."""
    inputs = text_inputs(request.get("input"))
    if inputs is None:
        raise AdapterError(
            wire.ERROR_BAD_REQUEST,
            "input must be a string, a token array, or a non-empty list of either",
        )
    if len(inputs) > MAX_INPUTS:
        raise AdapterError(wire.ERROR_BAD_REQUEST, f"input holds at most {MAX_INPUTS} items")
    dimensions = positive_int(request, "dimensions") or DEFAULT_DIMENSIONS
    if dimensions > MAX_DIMENSIONS:
        raise AdapterError(wire.ERROR_BAD_REQUEST, f"dimensions must be at most {MAX_DIMENSIONS}")
    encoding = request.get("encoding_format")
    if encoding not in (None, "float", "base64"):
        raise AdapterError(wire.ERROR_BAD_REQUEST, "encoding_format must be 'float' or 'base64'")
    data = []
    for index, item in enumerate(inputs):
        vector = echo_embedding(item.text, dimensions)
        # base64: little-endian float32, as OpenAI sends it
        encoded = base64.b64encode(_float32(vector)).decode() if encoding == "base64" else None
        embedding = vector if encoded is None else encoded
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    tokens = sum(item.tokens for item in inputs)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return {"object": "list", "data": data, "model": target, "usage": usage}, tokens
