"""CORS for browser apps calling the OpenAI API: off unless `openai.cors.allowed_origins` is set.

An allowed origin is echoed back (never `*`, so each answer names the one origin it is for) with
`Vary: Origin`; the decision headers are exposed to the page. A preflight (`OPTIONS`) is answered
by the Edge itself, before authentication, since browsers send it without credentials.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

Headers = list[tuple[bytes, bytes]]

ANY_ORIGIN = "*"
ALLOWED_METHODS = b"GET, POST, OPTIONS"
ALLOWED_HEADERS = (b"authorization", b"content-type", b"x-request-id")
MAX_AGE_S = 600
EXPOSED_HEADERS = (
    b"x-request-id, x-iop-provider, x-iop-node, x-iop-context-class, x-iop-queue-ms, "
    b"x-iop-attempts, x-iop-providers-tried, retry-after, retry-after-ms"
)
# Header names a preflight may ask for (the SDKs add their own, e.g. `x-stainless-os`).
_HEADER_NAME = re.compile(rb"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}")
MAX_REQUESTED_HEADERS = 64


def allowed_origin(origin: bytes | None, allowed: Iterable[str]) -> bytes | None:
    """The origin to echo when ``origin`` may call the API, else None."""
    if origin is None:
        return None
    try:
        text = origin.decode("ascii").lower()
    except UnicodeDecodeError:
        return None
    allowed = tuple(allowed)
    if text in allowed or (ANY_ORIGIN in allowed and text != "null"):
        return origin
    return None


def answer_headers(origin: bytes) -> Headers:
    """What every answer to an allowed origin carries."""
    return [
        (b"access-control-allow-origin", origin),
        (b"vary", b"Origin"),
        (b"access-control-expose-headers", EXPOSED_HEADERS),
    ]


def preflight_headers(origin: bytes, requested: bytes | None) -> Headers:
    """A preflight's answer for an allowed origin: methods, headers (the ones always allowed
    and those the browser asked for, when they are plain header names), max age."""
    names = list(ALLOWED_HEADERS)
    for name in (requested or b"").split(b",")[:MAX_REQUESTED_HEADERS]:
        name = name.strip().lower()
        if _HEADER_NAME.fullmatch(name) and name not in names:
            names.append(name)
    return [
        *answer_headers(origin),
        (b"access-control-allow-methods", ALLOWED_METHODS),
        (b"access-control-allow-headers", b", ".join(names)),
        (b"access-control-max-age", str(MAX_AGE_S).encode()),
    ]
