"""Helpers for the Node real-process tests: Edge status, SSE parsing, a raw Node websocket client.

Nothing here sleeps to synchronise: every wait polls a condition and fails after a timeout.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from nodes import wire
from tests.e2e.harness import EdgeProcess, Tokens, free_port, wait_until

WAIT_S = 10.0
DONE = "[DONE]"


def two_ports() -> tuple[int, int]:
    """A public and an admin port, distinct."""
    public = free_port()
    while (admin := free_port()) == public:
        pass
    return public, admin


def client_headers(tokens: Tokens, token_ref: str = "app-1") -> dict[str, str]:
    return {"Authorization": f"Bearer {tokens.client(token_ref)}"}


def chat_body(model: str, text: str, *, stream: bool = False, **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "stream": stream,
        **extra,
    }


# -- the Edge's operator status -----------------------------------------------------------------


def status(edge: EdgeProcess) -> dict[str, Any]:
    response = httpx.get(f"{edge.operator_url}/status", headers=edge.operator_headers(), timeout=5)
    response.raise_for_status()
    return response.json()


def node_is_ready(state: dict[str, Any], node_id: str) -> bool:
    return bool(state["nodes"].get(node_id, {}).get("ready"))


def providers_idle(state: dict[str, Any], provider_ids: Iterable[str]) -> bool:
    return all(state["providers"][pid]["in_flight"] == 0 for pid in provider_ids)


def wait_status(
    edge: EdgeProcess, check: Callable[[dict[str, Any]], bool], what: str, timeout: float = WAIT_S
) -> dict[str, Any]:
    """Poll ``GET /status`` until ``check`` holds; return that status."""

    def matching() -> dict[str, Any] | None:
        state = status(edge)
        return state if check(state) else None

    return wait_until(matching, timeout=timeout, what=what)


def wait_node_ready(edge: EdgeProcess, node_id: str, timeout: float = 20.0) -> dict[str, Any]:
    return wait_status(
        edge, lambda s: node_is_ready(s, node_id), f"node {node_id} to be ready", timeout
    )


def wait_idle(edge: EdgeProcess, *provider_ids: str, timeout: float = WAIT_S) -> dict[str, Any]:
    what = f"in_flight of {', '.join(provider_ids)} back to 0"
    return wait_status(edge, lambda s: providers_idle(s, provider_ids), what, timeout)


async def astatus(edge: EdgeProcess) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=5, headers=edge.operator_headers()) as client:
        response = await client.get(f"{edge.operator_url}/status")
    response.raise_for_status()
    return response.json()


async def await_until(
    condition: Callable[[], Awaitable[Any]], timeout: float = WAIT_S, what: str = "condition"
) -> Any:
    """The async ``wait_until``: poll without blocking the event loop (raw Nodes answer pings)."""
    deadline = time.monotonic() + timeout
    while True:
        result = await condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


# -- server-sent events -------------------------------------------------------------------------


def sse_payload(line: str) -> Any | None:
    """The parsed ``data:`` of one SSE line (``DONE`` for the sentinel); None for other lines."""
    if not line.startswith("data:"):
        return None
    data = line[5:].strip()
    return DONE if data == DONE else json.loads(data)


def sse_payloads(lines: Iterable[str]) -> list[Any]:
    return [p for p in (sse_payload(line) for line in lines) if p is not None]


def streamed_content(events: Iterable[Any]) -> str:
    return "".join(
        (choice.get("delta") or {}).get("content") or ""
        for event in events
        if isinstance(event, dict)
        for choice in event.get("choices") or ()
    )


# -- a Node played by the test ------------------------------------------------------------------


class RawNode:
    """A websocket client speaking the wire by hand, to send what a real Node never would.

    A background task reads every frame: it answers the Edge's keep-alive ``ping`` (else the Edge
    drops a silent Node after three intervals) and queues everything else for ``expect``.
    """

    def __init__(self, websocket: ClientConnection, node_id: str) -> None:
        self.ws = websocket
        self.node_id = node_id
        self.frames: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.seen: list[dict[str, Any]] = []
        self.closed = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def connect(
        cls, edge: EdgeProcess, node_id: str, headers: dict[str, str] | None = None
    ) -> RawNode:
        websocket = await connect(edge.ws_url, additional_headers=headers or {}, open_timeout=5)
        return cls(websocket, node_id)

    @classmethod
    async def as_node(cls, edge: EdgeProcess, tokens: Tokens, node_id: str) -> RawNode:
        return await cls.connect(
            edge,
            node_id,
            {"Authorization": f"Bearer {tokens.node(node_id)}", "X-IOP-Node": node_id},
        )

    async def _read(self) -> None:
        try:
            async for text in self.ws:
                frame = json.loads(text)
                self.seen.append(frame)
                if frame.get("type") == "ping":
                    await self.ws.send(wire.encode(wire.pong(frame.get("ts"))))
                else:
                    await self.frames.put(frame)
        except ConnectionClosed:
            pass
        finally:
            self.closed.set()

    async def send(self, frame: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(frame))

    async def send_text(self, text: str) -> None:
        await self.ws.send(text)

    async def expect(self, frame_type: str, timeout: float = WAIT_S) -> dict[str, Any]:
        """The next queued frame of ``frame_type`` (frames of other types are passed over)."""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    frame = await self.frames.get()
                    if frame["type"] == frame_type:
                        return frame
        except TimeoutError:
            raise AssertionError(
                f"{self.node_id}: no {frame_type!r} frame within {timeout} s "
                f"(frames seen: {[f['type'] for f in self.seen]}, close code {self.ws.close_code})"
            ) from None

    async def hello(self) -> dict[str, Any]:
        """Send ``hello``; return the Edge's ``config``."""
        await self.send(dict(wire.hello(self.node_id, "raw-test")))
        return await self.expect("config")

    async def handshake(self) -> dict[str, Any]:
        """hello -> config -> ack (applied) -> every provider healthy; return the config."""
        config = await self.hello()
        await self.send(dict(wire.config_ack(config["revision"])))
        providers = {p["id"]: (True, "raw") for p in config["node"]["providers"]}
        await self.send(dict(wire.provider_health(providers)))
        return config

    async def close_code(self, timeout: float = WAIT_S) -> int | None:
        """Wait for the connection to end; the close code the Edge sent."""
        try:
            async with asyncio.timeout(timeout):
                await self.closed.wait()
        except TimeoutError:
            raise AssertionError(
                f"{self.node_id}: the Edge did not close the connection within {timeout} s"
            ) from None
        return self.ws.close_code

    async def still_open(self) -> bool:
        """Prove the connection works: a ``ping`` gets its ``pong``."""
        stamp = time.time()
        await self.send(dict(wire.ping(stamp)))
        while True:
            pong = await self.expect("pong")
            if pong.get("ts") == stamp:
                return True

    async def aclose(self) -> None:
        await self.ws.close()
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)
