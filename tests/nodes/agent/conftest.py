"""Fixtures for the Node agent tests: a real websocket server playing the Edge, node payloads.

Everything here waits on conditions with timeouts; nothing sleeps to synchronise.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from nodes import wire
from nodes.agent.adapters import Delta, Done, build_adapter
from nodes.agent.adapters.base import make_usage
from nodes.agent.agent import AgentSettings, Backoff, NodeAgent
from tests.nodes.node_payloads import make_node

WAIT_S = 5.0
TOKEN = "node-secret-token"


class EdgeConnection:
    """One Node connection as the fake Edge sees it: every frame it sent, decoded."""

    def __init__(self, websocket: ServerConnection) -> None:
        self.websocket = websocket
        self.headers = websocket.request.headers
        self.frames: list[dict[str, Any]] = []
        self.batches = 0  # batch frames among them, each taken apart as the Edge does
        self.closed = asyncio.Event()
        self._arrived = asyncio.Condition()
        self._taken: set[int] = set()

    async def read_until_closed(self) -> None:
        try:
            async for text in self.websocket:
                frame = wire.decode(text, accept=wire.NODE_TO_EDGE)
                frames = [frame]
                if frame["type"] == "batch":
                    self.batches += 1
                    frames = [
                        wire.decode(inner, accept=wire.BATCHED_NODE_TO_EDGE)
                        for inner in frame["frames"]
                    ]
                async with self._arrived:
                    self.frames.extend(dict(f) for f in frames)
                    self._arrived.notify_all()
        except ConnectionClosed:
            pass
        finally:
            self.closed.set()

    async def send(self, frame: wire.Frame) -> None:
        await self.websocket.send(wire.encode(frame))

    async def expect(self, frame_type: str, **fields: Any) -> dict[str, Any]:
        """The next frame of ``frame_type`` whose fields match, not returned before."""

        def find() -> dict[str, Any] | None:
            for index, frame in enumerate(self.frames):
                if index in self._taken or frame["type"] != frame_type:
                    continue
                if all(frame.get(k) == v for k, v in fields.items()):
                    self._taken.add(index)
                    return frame
            return None

        async with asyncio.timeout(WAIT_S), self._arrived:
            while (frame := find()) is None:
                await self._arrived.wait()
            return frame

    def run_events(self, run_id: str) -> list[dict[str, Any]]:
        return [f for f in self.frames if f["type"] == "run.event" and f["run_id"] == run_id]

    async def handshake(
        self, node: wire.NodePayload, revision: str = "rev-1", features: list[str] | None = None
    ) -> dict[str, Any]:
        """hello -> config (with the Edge's ``features``) -> ack; returns the ack."""
        await self.expect("hello")
        await self.send(wire.config(revision, node, features=features))
        return await self.expect("config.ack", revision=revision)

    async def round_trip(self, ts: float) -> None:
        """A ping/pong: every frame the Node sent before answering has arrived by then."""
        await self.send(wire.ping(ts))
        await self.expect("pong", ts=ts)


class FakeEdge:
    def __init__(self) -> None:
        self.url = ""
        self.connections: asyncio.Queue[EdgeConnection] = asyncio.Queue()
        self.on_connect: Callable[[EdgeConnection], Any] | None = None

    async def handler(self, websocket: ServerConnection) -> None:
        connection = EdgeConnection(websocket)
        self.connections.put_nowait(connection)
        if self.on_connect is not None:
            await self.on_connect(connection)
        await connection.read_until_closed()

    async def next_connection(self) -> EdgeConnection:
        async with asyncio.timeout(WAIT_S):
            return await self.connections.get()


@pytest.fixture
async def edge() -> AsyncIterator[FakeEdge]:
    fake = FakeEdge()
    async with serve(fake.handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        fake.url = f"ws://127.0.0.1:{port}/ws/node/"
        yield fake


def chat(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": "echo-small",
        "stream": True,
        "messages": [{"role": "user", "content": text}],
        **extra,
    }


def run_request(
    run_id: str,
    text: str = "hello world",
    *,
    provider_id: str = "p-echo",
    adapter_id: str = "echo",
    target: str = "echo-small",
    deadline_in_s: float = 30.0,
    **extra: Any,
) -> wire.RunRequest:
    return wire.run_request(
        run_id, provider_id, adapter_id, target, chat(text, **extra), time.time() + deadline_in_s
    )


GATED = (wire.AdapterSpec(id="gated", type="echo"),)
GATED_PROVIDERS = (("p-echo", "echo", ("echo-small",)), ("p-gated", "gated", ("gated-model",)))


class GatedAdapter:
    """Streams one delta, then waits for the test to ``release`` it; records cleanup."""

    probe_interval_s = None

    def __init__(self, spec: wire.AdapterSpec) -> None:
        self.id = spec.id
        self.release = asyncio.Event()
        self.cleaned_up = asyncio.Event()
        self.closed = asyncio.Event()

    async def stream(
        self, request: dict[str, Any], target: str, endpoint: str
    ) -> AsyncIterator[Any]:
        try:
            yield Delta({"object": "chat.completion.chunk", "model": target, "choices": []})
            await self.release.wait()
            yield Done(make_usage(1, 1), "stop")
        finally:
            self.cleaned_up.set()

    async def probe(self) -> tuple[bool, str]:
        return True, "gated"

    async def aclose(self) -> None:
        self.closed.set()


class GatedFactory:
    """Builds real adapters, except ``gated`` ones, which it keeps for the test to drive."""

    def __init__(self) -> None:
        self.built: list[GatedAdapter] = []

    def __call__(self, spec: wire.AdapterSpec) -> Any:
        if spec.id != "gated":
            return build_adapter(spec)
        adapter = GatedAdapter(spec)
        self.built.append(adapter)
        return adapter


def gated_node(**kwargs: Any) -> wire.NodePayload:
    return make_node(extra_adapters=GATED, providers=GATED_PROVIDERS, **kwargs)


def gated_run(run_id: str, **kwargs: Any) -> wire.RunRequest:
    return run_request(
        run_id, provider_id="p-gated", adapter_id="gated", target="gated-model", **kwargs
    )


async def wait(event: asyncio.Event) -> None:
    async with asyncio.timeout(WAIT_S):
        await event.wait()


class LogWatch(logging.Handler):
    """Collects the agent's log messages and lets a test wait for one."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []
        self._logged = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        self._logged.set()

    async def wait_for(self, start: str) -> str:
        async with asyncio.timeout(WAIT_S):
            while True:
                found = next((m for m in self.messages if m.startswith(start)), None)
                if found is not None:
                    return found
                self._logged.clear()
                await self._logged.wait()


@pytest.fixture
def agent_log() -> Iterator[LogWatch]:
    logger = logging.getLogger("nodes.agent")
    watch = LogWatch()
    previous_level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(watch)
    yield watch
    logger.removeHandler(watch)
    logger.setLevel(previous_level)


@pytest.fixture
def gated() -> GatedFactory:
    return GatedFactory()


@pytest.fixture
def fakes() -> Any:
    """The helpers above, for test modules (they cannot import conftest)."""
    return _Fakes


class _Fakes:
    make_node = staticmethod(make_node)
    run_request = staticmethod(run_request)
    chat = staticmethod(chat)
    gated_node = staticmethod(gated_node)
    gated_run = staticmethod(gated_run)
    wait = staticmethod(wait)
    GATED = GATED
    GATED_PROVIDERS = GATED_PROVIDERS
    TOKEN = TOKEN
    WAIT_S = WAIT_S


@pytest.fixture
def start_agent(edge: FakeEdge) -> Callable[..., contextlib.AbstractAsyncContextManager[NodeAgent]]:
    """Run a NodeAgent against the fake Edge for the body of an ``async with``."""

    @contextlib.asynccontextmanager
    async def start(**kwargs: Any) -> AsyncIterator[NodeAgent]:
        settings = AgentSettings(
            edge_url=edge.url,
            node_id=kwargs.pop("node_id", "node-a"),
            token=TOKEN,
            drain_timeout_s=kwargs.pop("drain_timeout_s", 5.0),
        )
        kwargs.setdefault("backoff", Backoff(initial_s=0.01, cap_s=0.05))
        agent = NodeAgent(settings, **kwargs)
        task = asyncio.create_task(agent.run())
        try:
            yield agent
        finally:
            agent.request_stop()
            async with asyncio.timeout(WAIT_S):
                await task

    return start
