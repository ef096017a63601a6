"""A Node that stops answering, or never says hello, is dropped; its providers leave."""

from __future__ import annotations

import asyncio
import json

from websockets.asyncio.client import connect

from nodes import wire
from tests.e2e.harness import echo_config
from tests.e2e.nodes_support import node_is_ready, status, two_ports, wait_status


async def test_it_drops_a_node_that_goes_silent(tokens, edge_factory) -> None:
    edge = edge_factory(echo_config(tokens, *two_ports()))  # pings every second
    headers = {"Authorization": f"Bearer {tokens.node('node-a')}", "X-IOP-Node": "node-a"}

    async with connect(edge.ws_url, additional_headers=headers) as websocket:
        await websocket.send(wire.encode(wire.hello("node-a", "silent-test")))
        config = json.loads(await websocket.recv())
        await websocket.send(wire.encode(wire.config_ack(config["revision"])))
        await asyncio.to_thread(
            wait_status, edge, lambda s: node_is_ready(s, "node-a"), "node-a ready"
        )

        # From here on the Node sends nothing, not even a pong: within three intervals it is gone.
        await asyncio.wait_for(websocket.wait_closed(), timeout=10)

    assert websocket.close_code == wire.CLOSE_PROTOCOL_ERROR
    assert "node-a" not in status(edge)["nodes"]
    assert not status(edge)["providers"]["echo-1"]["node_ready"]
    assert "no frame for" in edge.log()


async def test_it_drops_a_session_that_never_says_hello(tokens, edge_factory) -> None:
    edge = edge_factory(echo_config(tokens, *two_ports()))  # waits two seconds for a hello
    headers = {"Authorization": f"Bearer {tokens.node('node-a')}", "X-IOP-Node": "node-a"}

    async with connect(edge.ws_url, additional_headers=headers) as websocket:
        error = json.loads(await asyncio.wait_for(websocket.recv(), timeout=10))
        await asyncio.wait_for(websocket.wait_closed(), timeout=10)

    assert error == {"type": "error", "code": "hello_timeout", "message": "no hello within 2 s"}
    assert websocket.close_code == wire.CLOSE_PROTOCOL_ERROR
    assert "node-a" not in status(edge)["nodes"]
