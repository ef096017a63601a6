"""Fixes to Twisted's HTTP request handling under daphne: a cheaper parse, the body limit, a
deadline for reading a request, and a cap on connections per peer.

Twisted parses every POST's Content-Type with the `email` package to decide whether to decode a
form body — about 7% of the Edge's CPU per chat completion here (docs/benchmarks.md). Daphne hands
the raw body to the ASGI app and never reads Twisted's parsed form arguments, so a plain parse
with the same result is enough.

Twisted also stores every body of 100 kB or more (and every chunked one) in a temporary file, and
daphne starts the app only once the whole body is in: a 300 MiB POST is written to disk before
anything can refuse it. Here a body over ``IOP_MAX_BODY_BYTES`` (on the operator listener, over
``DATA_UPLOAD_MAX_MEMORY_SIZE``: a refresh carries a whole config) is answered 413 as soon as that
is known — from ``Content-Length``, or as a chunked body passes the limit — and one within the
limit is kept in memory (the limit bounds it), never in a file.

Twisted's idle timeout starts over with every byte received, so a client trickling its headers a
byte at a time holds its socket forever (slowloris). Here the same timer is a deadline: a request
must be read whole within ``IOP_REQUEST_READ_TIMEOUT_S`` of the connection opening or of the
previous response ending. Twisted stops the timer once a request is in, so a long answer, a
stream or a websocket is never cut by it.

And no peer address holds more than ``IOP_MAX_CONNECTIONS_PER_PEER`` connections at once
(``iop_site.connection_limits``): one more is closed as soon as it is accepted.
"""

from __future__ import annotations

from io import BytesIO
from typing import Any

from twisted.internet.interfaces import IAddress
from twisted.protocols.policies import ProtocolWrapper, WrappingFactory
from twisted.web import http

from iop_site.connection_limits import LINGER_S, PeerConnections, peer_connections, raw_response


def media_type(line: bytes) -> bytes:
    """The lowercased `type/subtype` of a Content-Type value; `text/plain` when malformed.

    The same answer `email.message.EmailMessage.get_content_type()` gives.
    """
    media = line.split(b";", 1)[0].strip().lower()
    return media if media.count(b"/") == 1 else b"text/plain"


def install() -> None:
    # Imported here: daphne and the Edge's settings are only ready once run_edge runs.
    import daphne.server
    from daphne.http_protocol import HTTPFactory, WebRequest
    from django.conf import settings

    from edge.openai_api.app import body_too_large
    from edge.operator_api.errors import BODY_TOO_LARGE
    from iop_site import twisted_writes
    from iop_site.listeners import OPERATOR, listener_of_port

    http._parseContentType = media_type
    limit: int = settings.IOP_MAX_BODY_BYTES
    refusal = raw_response(413, b"Request Entity Too Large", body_too_large(limit).body())
    operator_limit: int = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    operator_refusal = raw_response(413, b"Request Entity Too Large", BODY_TOO_LARGE)
    process = WebRequest.process

    def got_length(request: Any, length: int | None) -> None:
        request.content = BytesIO()
        request.body_size = 0
        port = request.channel.transport.getHost().port
        if listener_of_port(port) == OPERATOR:
            request.body_limit, request.refusal = operator_limit, operator_refusal
        else:
            request.body_limit, request.refusal = limit, refusal
        if length is not None and length > request.body_limit:
            _refuse(request, request.refusal)

    def handle_content_chunk(request: Any, data: bytes) -> None:
        if getattr(request, "body_refused", False):
            return
        request.body_size += len(data)
        if request.body_size > request.body_limit:
            request.content = BytesIO()  # what was kept goes at once
            _refuse(request, request.refusal)
            return
        request.content.write(data)

    def guarded_process(request: Any) -> Any:
        if getattr(request, "body_refused", False):
            return None  # answered already: the app never sees this request
        return process(request)

    WebRequest.gotLength = got_length
    WebRequest.handleContentChunk = handle_content_chunk
    WebRequest.process = guarded_process

    # Data no longer pushes the timer back: what was a per-byte idle timeout is a deadline.
    http.HTTPChannel.resetTimeout = lambda channel: None  # type: ignore[method-assign]
    read_timeout: float = settings.IOP_REQUEST_READ_TIMEOUT_S
    per_peer: int = settings.IOP_MAX_CONNECTIONS_PER_PEER

    def http_factory(server: Any) -> HTTPFactory | PeerLimit:
        factory = HTTPFactory(server)
        factory.timeOut = read_timeout
        factory.log = twisted_writes.no_access_log  # run_edge sends Twisted's log nowhere
        return PeerLimit(factory, peer_connections()) if per_peer else factory

    # daphne's Server builds its factory when it runs; this is the one it listens with.
    daphne.server.HTTPFactory = http_factory
    twisted_writes.install()


class PeerLimit(WrappingFactory):
    """Wraps the HTTP factory: a peer over the cap (``iop_site.connection_limits``) gets no
    more connections.

    A wrapper stays the transport of its connection when daphne hands it to a websocket (as a
    TLS wrapper would), so a Node's socket is counted until it closes too.
    """

    def __init__(self, wrapped: Any, peers: PeerConnections) -> None:
        super().__init__(wrapped)
        self.peers = peers

    # None refuses the connection, which Twisted's stubs for this factory do not allow for.
    def buildProtocol(self, addr: IAddress | None) -> ProtocolWrapper | None:  # type: ignore[override]
        if self.peers.refuses(_host(addr)):
            return None  # Twisted closes the accepted socket at once
        return super().buildProtocol(addr)

    def registerProtocol(self, p: ProtocolWrapper) -> None:
        super().registerProtocol(p)
        self.peers.opened(_host(p.getPeer()))

    def unregisterProtocol(self, p: ProtocolWrapper) -> None:
        super().unregisterProtocol(p)
        self.peers.closed(_host(p.getPeer()))


def _host(addr: IAddress | None) -> str:
    return str(getattr(addr, "host", ""))


def _refuse(request: Any, response: bytes) -> None:
    """Answer now and stop reading this connection's requests; drop the rest it sends."""
    from twisted.internet import reactor

    request.body_refused = True
    request.channel.setTimeout(None)  # the linger below bounds this connection now
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
