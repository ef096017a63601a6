"""Daphne forgets each finished request as it ends, not in a sweep once a second.

Daphne keeps every request (and websocket) in ``Server.connections`` until a timer that runs
once a second finds it finished and its application done, and only then lets it go. At 1,500
requests a second that sweep, and the timeout check beside it, took 14 to 22 ms of the event
loop every second, during which no request, stream chunk or Node frame moved
(docs/benchmarks.md). Here an entry whose request has ended is dropped as soon as its
application is done too, exactly as the sweep would drop it. An application that ended with an
exception is left to the sweep, which logs it and answers the client as before.
"""

from __future__ import annotations

import asyncio
from typing import Any


def reap(server: Any, protocol: Any) -> None:
    """Drop ``protocol``'s entry if its request has ended and its application ended cleanly."""
    details = server.connections.get(protocol)
    if details is None or "disconnected" not in details:
        return
    application = details.get("application_instance")
    if application is not None and not _ended_cleanly(application):
        return
    del server.connections[protocol]


def _ended_cleanly(application: asyncio.Future[Any]) -> bool:
    return application.done() and (application.cancelled() or application.exception() is None)


def install() -> None:
    # Imported here: daphne.server installs Twisted's asyncio reactor on import.
    from daphne.server import Server

    reap_on_end(Server)


def reap_on_end(server_class: Any) -> None:
    """Make ``server_class`` (daphne's ``Server``) drop each entry as soon as it has ended."""
    create_application = server_class.create_application
    protocol_disconnected = server_class.protocol_disconnected

    def create_reaped_application(self: Any, protocol: Any, scope: dict) -> Any:
        queue = create_application(self, protocol, scope)
        application = self.connections.get(protocol, {}).get("application_instance")
        if application is not None:
            application.add_done_callback(lambda _: reap(self, protocol))
        return queue

    def reaping_protocol_disconnected(self: Any, protocol: Any) -> None:
        if protocol in self.connections:  # else it ended and was dropped already
            protocol_disconnected(self, protocol)
            reap(self, protocol)

    server_class.create_application = create_reaped_application
    server_class.protocol_disconnected = reaping_protocol_disconnected
