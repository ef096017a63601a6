"""Fixes to Twisted's HTTP request handling under daphne: a cheaper parse, and the body limit.

Twisted parses every POST's Content-Type with the `email` package to decide whether to decode a
form body — about 7% of the Edge's CPU per chat completion here (docs/benchmarks.md). Daphne hands
the raw body to the ASGI app and never reads Twisted's parsed form arguments, so a plain parse
with the same result is enough.

Twisted also stores every body of 100 kB or more (and every chunked one) in a temporary file, and
daphne starts the app only once the whole body is in: a 300 MiB POST is written to disk before
anything can refuse it. Here a body over ``IOP_MAX_BODY_BYTES`` is answered 413 as soon as that is
known — from ``Content-Length``, or as a chunked body passes the limit — and one within the limit
is kept in memory (the limit bounds it), never in a file.
"""

from __future__ import annotations

from io import BytesIO
from typing import Any

from twisted.web import http

# After a 413 the client may still be sending its body: it is read and dropped for this long, so
# the client reads the answer instead of a connection reset, then the connection is cut.
LINGER_S = 30.0


def media_type(line: bytes) -> bytes:
    """The lowercased `type/subtype` of a Content-Type value; `text/plain` when malformed.

    The same answer `email.message.EmailMessage.get_content_type()` gives.
    """
    media = line.split(b";", 1)[0].strip().lower()
    return media if media.count(b"/") == 1 else b"text/plain"


def install() -> None:
    # Imported here: daphne and the Edge's settings are only ready once run_edge runs.
    from daphne.http_protocol import WebRequest
    from django.conf import settings

    from edge.openai_api.app import body_too_large

    http._parseContentType = media_type
    limit: int = settings.IOP_MAX_BODY_BYTES
    refusal = _response(413, b"Request Entity Too Large", body_too_large(limit).body())
    process = WebRequest.process

    def got_length(request: Any, length: int | None) -> None:
        request.content = BytesIO()
        request.body_size = 0
        if length is not None and length > limit:
            _refuse(request, refusal)

    def handle_content_chunk(request: Any, data: bytes) -> None:
        if getattr(request, "body_refused", False):
            return
        request.body_size += len(data)
        if request.body_size > limit:
            request.content = BytesIO()  # what was kept goes at once
            _refuse(request, refusal)
            return
        request.content.write(data)

    def guarded_process(request: Any) -> Any:
        if getattr(request, "body_refused", False):
            return None  # answered already: the app never sees this request
        return process(request)

    WebRequest.gotLength = got_length
    WebRequest.handleContentChunk = handle_content_chunk
    WebRequest.process = guarded_process


def _response(status: int, reason: bytes, body: bytes) -> bytes:
    head = (
        b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
        b"Connection: close\r\n\r\n" % (status, reason, len(body))
    )
    return head + body


def _refuse(request: Any, response: bytes) -> None:
    """Answer now and stop reading this connection's requests; drop the rest it sends."""
    from twisted.internet import reactor

    request.body_refused = True
    # No `100 Continue` for a body that is refused: a client waiting for it sends nothing.
    request.requestHeaders.removeHeader(b"Expect")
    channel = request.channel
    transport = channel.transport
    transport.write(response)
    channel.dataReceived = lambda data: None
    # End our side after the answer; keep reading (and dropping) until the client closes.
    getattr(transport, "loseWriteConnection", transport.loseConnection)()
    # Twisted declares the interface method without `self`, so mypy shifts its arguments.
    reactor.callLater(LINGER_S, transport.abortConnection)  # type: ignore[arg-type]
