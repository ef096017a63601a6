"""One measured fix to Twisted's HTTP request handling under daphne.

Twisted parses every POST's Content-Type with the `email` package to decide whether to decode a
form body — about 7% of the Edge's CPU per chat completion here (docs/benchmarks.md). Daphne hands
the raw body to the ASGI app and never reads Twisted's parsed form arguments, so a plain parse
with the same result is enough.
"""

from __future__ import annotations

from twisted.web import http


def media_type(line: bytes) -> bytes:
    """The lowercased `type/subtype` of a Content-Type value; `text/plain` when malformed.

    The same answer `email.message.EmailMessage.get_content_type()` gives.
    """
    media = line.split(b";", 1)[0].strip().lower()
    return media if media.count(b"/") == 1 else b"text/plain"


def install() -> None:
    http._parseContentType = media_type
