"""Per-write and per-request costs Twisted pays under daphne that the Edge does not need.

- **Writes.** Twisted sends nothing when it is asked to write: it registers the socket with the
  event loop for writability, sends when the loop reports it, and unregisters it again. That is
  two ``epoll_ctl`` calls and a loop turn for every write, and a streaming Edge writes once per
  token per caller. Here a socket with data to send gets one call at the loop's next turn that
  sends what gathered by then (writes made in the same turn still leave in one ``send``); only
  what the socket did not take waits for writability, as before. That call is the reactor's own
  write step, without the log context Twisted puts around each one (a ``system`` prefix for
  legacy log lines, the connection's ``logPrefix()`` asked every time): the step catches and
  logs what fails itself, and the Edge logs through Python's logging.
- **The local address.** Twisted asks the kernel for a connection's own address
  (``getsockname``) each time it is wanted, and daphne and the body limit want it for every
  request; it cannot change, so it is asked once per connection.
- **Twisted's access log.** Every answer was formatted as an access log line for a log that
  ``run_edge`` sends nowhere (daphne at verbosity 0); the Edge meters its requests itself.

The measurements are in docs/benchmarks.md.
"""

from __future__ import annotations

from typing import Any


def install() -> None:
    # Imported here: the reactor must be the one daphne installed (on import of daphne.server).
    from twisted.internet import asyncioreactor, tcp

    reactor_type = asyncioreactor.AsyncioSelectorReactor
    add_writer, remove_writer = reactor_type.addWriter, reactor_type.removeWriter

    def soon(reactor: Any) -> set[Any]:
        pending: set[Any] | None = getattr(reactor, "_iop_soon_writers", None)
        if pending is None:
            pending = reactor._iop_soon_writers = set()
        return pending

    def write_soon(reactor: Any, writer: Any) -> None:
        pending = soon(reactor)
        if writer not in pending:
            return  # it stopped writing before its turn (closed, or nothing left)
        # Still pending while it writes: its stopWriting, once everything is sent, takes it out.
        reactor._readOrWrite(writer, False)
        if writer in pending:  # the socket took only part: the rest waits for writability
            pending.discard(writer)
            add_writer(reactor, writer)

    def add_writer_soon(reactor: Any, writer: Any) -> None:
        pending = soon(reactor)
        if writer in pending or writer in reactor._writers:
            return
        if writer in reactor._continuousPolling._writers:
            return
        pending.add(writer)
        reactor._asyncioEventloop.call_soon(write_soon, reactor, writer)

    def remove_writer_soon(reactor: Any, writer: Any) -> None:
        pending = soon(reactor)
        if writer in pending:
            pending.discard(writer)
            return
        remove_writer(reactor, writer)

    reactor_type.addWriter = add_writer_soon  # type: ignore[method-assign]
    reactor_type.removeWriter = remove_writer_soon  # type: ignore[method-assign]

    get_host = tcp.Server.getHost

    def cached_host(connection: Any) -> Any:
        host = connection.__dict__.get("_iop_host")
        if host is None:
            host = connection._iop_host = get_host(connection)
        return host

    tcp.Server.getHost = cached_host  # type: ignore[method-assign]


def no_access_log(request: Any) -> None:
    """Twisted's ``HTTPFactory.log``, for a factory whose access log goes nowhere."""
