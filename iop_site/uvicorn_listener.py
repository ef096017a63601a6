"""`openai.listen` served by uvicorn (`openai.server: uvicorn`), in `run_edge`'s own process.

uvicorn runs on the event loop daphne's reactor already runs, over the same runtime, pool and
Node sessions, and calls the same ASGI application (`iop_site.asgi`), which serves only the OpenAI
API on this listener. Its HTTP parser is httptools' (C) where daphne's is Twisted's (Python): about
40 % less of the Edge's CPU per request (docs/benchmarks.md). The other listeners stay daphne's.

The connection limits are daphne's (``iop_site.daphne_tuning``), kept here for uvicorn:

- a request must be read whole within ``IOP_REQUEST_READ_TIMEOUT_S`` of the connection opening or
  of the previous answer ending, however steadily it trickles (uvicorn's own keep-alive timer
  starts over with every byte);
- the per-peer cap is the one count of all listeners (``iop_site.connection_limits``);
- a body over ``IOP_MAX_BODY_BYTES`` is refused by the OpenAI app, from ``Content-Length`` or as
  it passes the limit; what the client still sends is read and dropped for ``LINGER_S``, then the
  connection is cut. uvicorn holds at most 64 KiB of a body the app has not asked for yet;
- a request line and headers over ``MAX_HEAD_BYTES`` are answered 431 (Twisted's limits are
  16 KiB of each): httptools itself sets none.
"""

from __future__ import annotations

import asyncio
import math
import socket
from typing import Any

from django.conf import settings
from uvicorn import Config, Server
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from edge.config.formats import listen_host
from edge.openai_api.errors import APIError
from iop_site.connection_limits import LINGER_S, PeerConnections, peer_connections, raw_response
from iop_site.listeners import LISTEN_BACKLOG


class OpenAIListenerError(Exception):
    """The listener's address cannot be bound (in use, not this host's)."""


MAX_HEAD_BYTES = 32 * 1024
HEAD_TOO_LARGE = raw_response(
    431,
    b"Request Header Fields Too Large",
    APIError(
        431, f"The request line and headers exceed {MAX_HEAD_BYTES} bytes.", code="head_too_large"
    ).body(),
)


class WritesOfOneTurn:
    """The transport uvicorn's request cycle writes to: what one turn of the loop writes goes
    out in one send, at the end of the turn (a head and its body, the events of a stream that
    came in together), as daphne's writes do (``iop_site.twisted_writes``). uvicorn writes the
    head and the body separately: two system calls, and a client may read the head alone."""

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)

    def flush(self) -> None:
        if not self._pending:
            return
        data, self._pending = b"".join(self._pending), []
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()


class OpenAIProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the Edge's connection limits."""

    read_timeout_s: float
    peers: PeerConnections
    _writes: WritesOfOneTurn  # from connection_made on

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._peer: str | None = None  # counted against the cap while open
        self._deadline: asyncio.TimerHandle | None = None
        self._head_bytes = 0  # of the request being read, until its headers are in
        self._in_head = False
        self._dropping = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        host = str((transport.get_extra_info("peername") or ("",))[0])
        if self.peers.refuses(host):
            transport.abort()
            return
        self.peers.opened(host)
        self._peer = host
        super().connection_made(transport)
        self._writes = WritesOfOneTurn(transport, self.loop)
        self._arm_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._peer is None:  # refused in connection_made
            return
        self._disarm_deadline()
        self.peers.closed(self._peer)
        self._peer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._dropping:
            return
        super().data_received(data)
        # A read after which a head is still incomplete counts against its limit (all of it,
        # though it may carry the end of a pipelined request before); the read that completes
        # a head does not (it may carry the body). httptools buffers at most the limit and one
        # read of a head.
        if self._in_head and not self.transport.is_closing():
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._writes.write(HEAD_TOO_LARGE)  # after what this connection wrote before
                self._drop_the_rest()

    def on_message_begin(self) -> None:
        self._in_head, self._head_bytes = True, 0
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()
        if self.cycle is not None:  # None when the request upgrades (refused: no websockets)
            self.cycle.transport = self._writes  # type: ignore[assignment]

    def on_message_complete(self) -> None:
        self._disarm_deadline()  # the request is in: a long answer or stream is never cut
        super().on_message_complete()

    def _unsupported_upgrade_warning(self) -> None:
        """A websocket asked of this listener is answered 404 by the app: nothing to warn of."""

    def on_response_complete(self) -> None:
        unread_body = self.cycle is not None and self.cycle.more_body
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if unread_body:
            self._drop_the_rest()
        elif not self.pipeline:
            self._arm_deadline()  # for the next request on this connection

    def _drop_the_rest(self) -> None:
        """Answered before the request was read whole (a refused head or body): end our side,
        read and drop what still comes, then cut the connection. Closed at once, the client
        would get a reset, which can discard the answer before it is read."""
        self._dropping = True
        self._disarm_deadline()
        self._writes.flush()  # the answer, before our side ends
        self.flow.resume_reading()
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.abort)

    def _arm_deadline(self) -> None:
        self._disarm_deadline()
        self._deadline = self.loop.call_later(self.read_timeout_s, self._deadline_passed)

    def _disarm_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _deadline_passed(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()


def bind(listen: str) -> socket.socket:
    """The listening socket of ``listen`` (`host:port`), bound before the Edge serves."""
    host, port = listen_host(listen).strip("[]"), int(listen.rpartition(":")[2])
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(LISTEN_BACKLOG)
    except OSError as error:
        sock.close()
        raise OpenAIListenerError(f"openai.listen {listen}: {error.strerror or error}") from None
    sock.setblocking(False)
    return sock


class OpenAIListener:
    """uvicorn serving ``application`` on a bound socket, started and stopped by `run_edge`."""

    def __init__(self, application: Any, sock: socket.socket) -> None:
        read_timeout: float = settings.IOP_REQUEST_READ_TIMEOUT_S
        protocol = type(
            "EdgeOpenAIProtocol",
            (OpenAIProtocol,),
            {"read_timeout_s": read_timeout, "peers": peer_connections()},
        )
        self.sock = sock
        self.config = Config(
            application,
            loop="none",  # the loop daphne's reactor already runs on
            http=protocol,
            ws="none",  # a websocket upgrade here is refused (no websocket on this listener)
            lifespan="off",
            interface="asgi3",
            access_log=False,
            log_config=None,  # the Edge's logging, as configured by Django
            proxy_headers=False,  # the peer is the connection's, as on daphne's listeners
            server_header=False,
            date_header=False,
            timeout_keep_alive=math.ceil(read_timeout),
            backlog=LISTEN_BACKLOG,
        )
        self.server = Server(self.config)

    async def start(self) -> None:
        self.config.load()
        self.server.lifespan = self.config.lifespan_class(self.config)
        await self.server.startup(sockets=[self.sock])

    def stop_listening(self) -> None:
        """No new connections; those open finish what they are doing."""
        for server in getattr(self.server, "servers", ()):
            server.close()
