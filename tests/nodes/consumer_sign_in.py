"""Signing a Node in to the consumer in process, as the agent does: connect, hello, ack."""

from __future__ import annotations

import json
from typing import Any

from channels.testing import WebsocketCommunicator

from nodes import wire
from nodes.consumers import NodeConsumer
from tests.e2e.harness import Tokens


async def sign_in(tokens: Tokens, node_id: str = "node-a") -> tuple[WebsocketCommunicator, Any]:
    """A connected ``node_id`` that sent its hello and acked the config: the communicator and
    the `config` frame the Edge sent it."""
    headers = [
        (b"authorization", f"Bearer {tokens.node(node_id)}".encode()),
        (b"x-iop-node", node_id.encode()),
    ]
    communicator = WebsocketCommunicator(NodeConsumer.as_asgi(), "/ws/node/", headers=headers)
    connected, _ = await communicator.connect()
    assert connected
    await communicator.send_to(text_data=wire.encode(wire.hello(node_id, "test")))
    config = json.loads(await communicator.receive_from())
    await communicator.send_to(text_data=wire.encode(wire.config_ack(config["revision"])))
    return communicator, config
