"""The Node consumer in process: a bug inside it ends that session cleanly, never a zombie.

A real Node cannot make the consumer raise on purpose, so the bug is planted with monkeypatch;
everything else (Channels' consumer, the runtime, the session store, the pool) is the real thing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import yaml
from channels.testing import WebsocketCommunicator

from edge.config import load_config_text
from edge.runtime import EdgeRuntime, get_runtime, install_runtime, runtime_installed
from edge.usage import Usage
from nodes import consumers, wire
from nodes.consumers import CLOSE_INTERNAL_ERROR, NodeConsumer
from nodes.sessions import NODE_DISCONNECTED
from tests.e2e.harness import Tokens, echo_config

TOKENS = Tokens()


async def write_no_usage(batch: list[Usage]) -> None:
    return None


@pytest.fixture
def runtime(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[EdgeRuntime]:
    """The process's runtime for one echo node `node-a` (provider `echo-1`), no database."""
    previous = get_runtime() if runtime_installed() else None
    text = yaml.safe_dump(echo_config(TOKENS, 18000, 18001))
    runtime = EdgeRuntime(load_config_text(text), None, write_no_usage)
    install_runtime(runtime)

    async def no_database(node_id: str, revision: str) -> None:
        return None

    monkeypatch.setattr(consumers, "record_node_ack", no_database)
    yield runtime
    install_runtime(previous)


async def until(condition: Callable[[], Any], what: str) -> None:
    try:
        async with asyncio.timeout(5):
            while not condition():
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


@pytest.fixture
async def node(runtime: EdgeRuntime) -> AsyncIterator[WebsocketCommunicator]:
    """`node-a` connected, configured and ready."""
    headers = [
        (b"authorization", f"Bearer {TOKENS.node('node-a')}".encode()),
        (b"x-iop-node", b"node-a"),
    ]
    communicator = WebsocketCommunicator(NodeConsumer.as_asgi(), "/ws/node/", headers=headers)
    connected, _ = await communicator.connect()
    assert connected
    await communicator.send_to(text_data=wire.encode(wire.hello("node-a", "test")))
    config = json.loads(await communicator.receive_from())
    await communicator.send_to(text_data=wire.encode(wire.config_ack(config["revision"])))
    await until(lambda: runtime.pool.stats().providers["echo-1"].node_ready, "node-a ready")
    yield communicator
    await communicator.disconnect()


def boom(*args: Any, **kwargs: Any) -> None:
    raise RuntimeError("a bug in the consumer")


async def test_an_exception_in_a_handler_closes_the_session_and_its_runs_fail(
    runtime: EdgeRuntime, node: WebsocketCommunicator, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = runtime.nodes.ready("node-a")
    assert session is not None
    stream = session.open_run("r1")  # a run in flight on the Node
    monkeypatch.setattr(NodeConsumer, "_provider_health", boom)

    await node.send_to(text_data=wire.encode(wire.provider_health({"echo-1": (True, "ok")})))

    closed = await node.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": CLOSE_INTERNAL_ERROR}
    event, data = await asyncio.wait_for(stream.next_event(), 5)
    assert (event, data["code"]) == ("error", NODE_DISCONNECTED)
    assert runtime.nodes.get("node-a") is None
    assert not runtime.pool.stats().providers["echo-1"].node_ready


async def test_an_exception_in_the_keep_alive_closes_the_session(
    runtime: EdgeRuntime, node: WebsocketCommunicator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wire, "ping", boom)  # the next keep-alive ping raises

    closed = await node.receive_output(timeout=10)

    assert closed == {"type": "websocket.close", "code": CLOSE_INTERNAL_ERROR}
    assert runtime.nodes.get("node-a") is None
    assert not runtime.pool.stats().providers["echo-1"].node_ready
