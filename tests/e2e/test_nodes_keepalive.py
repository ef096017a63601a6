"""A Node that stops answering (silent, frozen) or never says hello is dropped; its providers
leave the pool and its runs fail, so their slots come back."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Callable
from typing import Any

import httpx
from django.conf import settings
from websockets.asyncio.client import connect

from nodes import wire
from tests.e2e.conftest import OpenAIStack
from tests.e2e.harness import Tokens, echo_config, wait_until
from tests.e2e.nodes_support import (
    chat_body,
    client_headers,
    node_is_ready,
    sse_payload,
    sse_payloads,
    status,
    streamed_content,
    two_ports,
    wait_status,
)


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


def frozen_config(tokens: Tokens, public: int, admin: int) -> dict[str, Any]:
    return echo_config(
        tokens,
        public,
        admin,
        adapters=[{"id": "slow", "type": "echo", "token_delay_ms": 200}],
        providers=[
            {"id": "slow-1", "adapter": "slow", "served_models": ["slow-small"], "capacity": 2}
        ],
        models=[{"id": "slow", "providers": {"slow-1": "slow-small"}}],
    )


# The shipped keep-alive drops a silent Node after three 2 s intervals, checked every interval:
# well within this. The keep-alive it replaces took 45-60 s.
FROZEN_DROP_TIMEOUT_S = 20


def test_a_frozen_node_stops_getting_runs_within_seconds_and_its_slots_come_back(
    tokens: Tokens, openai_stack_factory: Callable[..., OpenAIStack]
) -> None:
    # The shipped default, not the harness's fast one (the harness pings every second).
    env = {"IOP_NODE_PING_INTERVAL_S": str(settings.IOP_NODE_PING_INTERVAL_S)}
    stack = openai_stack_factory(frozen_config, env=env, name="frozen")
    node = stack.start_node("node-a")
    words = " ".join(f"w{i}" for i in range(100))  # 20 s of tokens: still going when it freezes
    body = chat_body("slow", words, stream=True)

    with httpx.stream(
        "POST", stack.edge.completions_url, json=body, headers=client_headers(tokens), timeout=60
    ) as response:
        lines = response.iter_lines()
        first = next(payload for line in lines if (payload := sse_payload(line)) is not None)
        assert stack.in_flight("slow-1") == 1
        os.kill(node.process.pid, signal.SIGSTOP)  # frozen: its socket stays open, it says nothing
        try:
            wait_until(
                lambda: not node_is_ready(stack.status(), "node-a")
                and stack.in_flight("slow-1") == 0,
                timeout=FROZEN_DROP_TIMEOUT_S,
                what="the frozen node to be dropped and its slot freed",
            )
            rest = sse_payloads(lines)
            refused = httpx.post(
                stack.edge.completions_url,
                json=chat_body("slow", "anyone there?"),
                headers=client_headers(tokens),
                timeout=30,
            )
        finally:
            os.kill(node.process.pid, signal.SIGCONT)

    assert streamed_content([first]).startswith("echo")
    assert rest[-1]["error"]["code"] == "node_disconnected"
    assert refused.status_code == 503  # no run went to the frozen node
    assert refused.json()["error"]["code"] == "no_provider_available"
    assert "node-a: no frame for" in stack.edge.log()
    stack.wait_ready("node-a")  # thawed, it connects again by itself
