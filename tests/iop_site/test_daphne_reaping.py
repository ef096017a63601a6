from __future__ import annotations

import asyncio
from typing import Any

import pytest

from iop_site.daphne_reaping import reap_on_end


async def answer_then_end(scope: dict, receive: Any, send: Any) -> None:
    await receive()  # daphne's `http.disconnect` once the request has ended


async def fail(scope: dict, receive: Any, send: Any) -> None:
    await receive()
    raise RuntimeError("the application failed")


def server_running(application: Any) -> Any:
    # Imported here: daphne.server installs Twisted's asyncio reactor on import.
    from daphne.server import Server

    class ReapingServer(Server):  # a subclass: daphne's own class stays as it is
        pass

    reap_on_end(ReapingServer)
    server = ReapingServer(application, endpoints=["tcp:port=0:interface=127.0.0.1"])
    server.connections = {}  # what Server.run sets up
    return server


class Request:
    """What daphne keys its entries by: the request's protocol object."""


def request_started(application: Any) -> tuple[Any, Request, asyncio.Queue[dict]]:
    """A server, a request it serves and the application's input queue."""
    server = server_running(application)
    request = Request()
    server.protocol_connected(request)
    return server, request, server.create_application(request, {"type": "http"})


async def settled() -> None:
    for _ in range(3):  # the application's end, then its done callbacks
        await asyncio.sleep(0)


async def test_an_entry_goes_once_its_request_and_application_have_both_ended() -> None:
    server, request, queue = request_started(answer_then_end)

    server.protocol_disconnected(request)
    await settled()
    assert request in server.connections  # the application still runs

    queue.put_nowait({"type": "http.disconnect"})
    await settled()
    assert request not in server.connections


async def test_an_application_that_ended_first_goes_with_its_request() -> None:
    server, request, queue = request_started(answer_then_end)
    queue.put_nowait({"type": "http.disconnect"})
    await settled()
    assert request in server.connections  # the request has not ended

    server.protocol_disconnected(request)

    assert request not in server.connections
    server.protocol_disconnected(request)  # ending again changes nothing


async def test_an_application_that_failed_is_left_to_daphnes_sweep() -> None:
    server, request, queue = request_started(fail)
    queue.put_nowait({"type": "http.disconnect"})
    server.protocol_disconnected(request)
    await settled()

    assert request in server.connections
    with pytest.raises(RuntimeError, match="failed"):
        server.connections[request]["application_instance"].result()
