"""The simulated fleet (bench/sim_fleet.py) speaks the wire as the real Node agent does.

A recording proxy sits between a real Edge and two Nodes: node-a is the agent (`python -m
nodes.agent`), node-b a ``SimulatedNode``. Both go through the same script (sign in, a live
refresh, a streamed and a whole run each, a run their client cancels) and what each sent must
match frame for frame, once the values that belong to one node or one run (ids, times) are
blanked. The one difference allowed is listed in ``ALLOWED_DIFFERENCES`` with its reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import yaml
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import Server, ServerConnection, serve

from bench.sim_fleet import SIM_VERSION, SimulatedFleet, SimulatedNode
from edge.tokens import sha256_hex
from nodes import wire
from nodes.agent.session import AGENT_VERSION
from tests.e2e.harness import EdgeProcess, NodeProcess, Tokens, echo_config
from tests.e2e.nodes_support import (
    await_until,
    chat_body,
    client_headers,
    sse_payloads,
    streamed_content,
    two_ports,
)

AGENT, SIM, SPARE = "node-a", "node-b", "node-c"
TEXT = "drift check"
REPLY = f"echo: {TEXT}"
WAIT_S = 20.0
KEEPALIVE = frozenset({"ping", "pong"})
NODE_TO_EDGE, EDGE_TO_NODE = "node->edge", "edge->node"
# Where the two may differ, and why; everything else they send must be equal.
ALLOWED_DIFFERENCES = {
    ("hello", "agent_version"): "the simulation names itself: the agent's version + '+sim'",
}
# What a refresh's push gets: an ack from both, and no session for the spare node.
ACKED = {AGENT: "acked", SIM: "acked", SPARE: "not_connected"}
# Values that belong to one node, run or moment, blanked before comparing.
VOLATILE = {"run_id": "<run>", "id": "<completion id>", "created": "<time>", "ts": "<time>"}


# -- the Edge's config: one echo node each, and a spare for the drop tests -----------------------


def node_entry(tokens: Tokens, node_id: str, refreshed: bool) -> dict[str, Any]:
    """The live refresh adds a provider. The slow adapter is there from the start (a new
    or changed adapter needs a restart): its runs give no first token before they are cancelled,
    its delay being at the bound."""
    adapters = [
        {"id": "echo", "type": "echo"},
        {"id": "slow", "type": "echo", "token_delay_ms": 10_000},
    ]
    names = ["echo", "slow", "more"] if refreshed else ["echo", "slow"]
    providers = [
        {
            "id": f"{node_id}-{name}",
            "adapter": "slow" if name == "slow" else "echo",
            "served_models": ["echo-small"],
            "capacity": 4,
        }
        for name in names
    ]
    return {
        "id": node_id,
        "token_hash_sha256": sha256_hex(tokens.node(node_id)),
        "adapters": adapters,
        "providers": providers,
    }


def model_of(node_id: str, *, slow: bool = False) -> str:
    return f"slow-to-{node_id}" if slow else f"to-{node_id}"


def fleet_config(
    tokens: Tokens, ports: tuple[int, int], *, refreshed: bool = False
) -> dict[str, Any]:
    """Each node serves models of its own, so a call picks the node it reaches."""
    nodes = [node_entry(tokens, node_id, refreshed) for node_id in (AGENT, SIM, SPARE)]
    models = []
    for node in nodes:
        for slow in (False, True):
            routes = {
                p["id"]: "echo-small" for p in node["providers"] if (p["adapter"] == "slow") == slow
            }
            if routes:
                models.append({"id": model_of(node["id"], slow=slow), "providers": routes})
    first, *others = nodes
    return echo_config(
        tokens,
        *ports,
        node_id=AGENT,
        adapters=first["adapters"],
        providers=first["providers"],
        models=models,
        extra_nodes=others,
    )


# -- a recording proxy in front of the Edge ------------------------------------------------------


@dataclass
class Recorded:
    direction: str
    frame: dict[str, Any]


@dataclass
class RecordingProxy:
    """Relays each Node's websocket to the Edge and back, keeping every frame, in order, per
    node. Frames the wire codec refuses are kept in ``refused``."""

    edge_ws_url: str
    frames: dict[str, list[Recorded]] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    server: Server | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        port = next(iter(self.server.sockets)).getsockname()[1]
        return f"ws://127.0.0.1:{port}/ws/node/"

    async def relay(self, node: ServerConnection) -> None:
        headers = {name: node.request.headers[name] for name in ("Authorization", "X-IOP-Node")}
        node_id = headers["X-IOP-Node"]
        self.frames[node_id] = []  # a new session starts a new record
        async with connect(
            self.edge_ws_url,
            additional_headers=headers,
            max_size=wire.MAX_SOCKET_MESSAGE_BYTES,
            compression=None,
        ) as edge:
            await asyncio.gather(
                self.pump(node, edge, node_id, NODE_TO_EDGE),
                self.pump(edge, node, node_id, EDGE_TO_NODE),
            )

    async def pump(
        self,
        source: ServerConnection | ClientConnection,
        sink: ServerConnection | ClientConnection,
        node_id: str,
        direction: str,
    ) -> None:
        accept = wire.NODE_TO_EDGE if direction == NODE_TO_EDGE else wire.EDGE_TO_NODE
        async for text in source:
            self.record(node_id, direction, text, accept)
            await sink.send(text)
        # Pass the close on as it came (1005/1006 are never sent on the wire).
        code = source.close_code if source.close_code not in (None, 1005, 1006) else 1000
        await sink.close(code, source.close_reason or "")

    def record(
        self, node_id: str, direction: str, text: str | bytes, accept: frozenset[str]
    ) -> None:
        """One frame as the Edge takes it: a batch (the agent's, docs/wire.md) frame by frame."""
        try:
            frame = wire.decode(text, accept=accept)
        except wire.FrameError as exc:
            self.refused.append(f"{node_id} {direction}: {exc.message}")
            return
        if frame["type"] == "batch":
            for inner in frame["frames"]:
                self.record(node_id, direction, inner, wire.BATCHED_NODE_TO_EDGE)
            return
        self.frames[node_id].append(Recorded(direction, dict(frame)))

    def sent(self, node_id: str, direction: str) -> list[dict[str, Any]]:
        return [r.frame for r in self.frames.get(node_id, []) if r.direction == direction]

    def count(self, node_id: str, direction: str, frame_type: str) -> int:
        return sum(f["type"] == frame_type for f in self.sent(node_id, direction))


@contextlib.asynccontextmanager
async def recording_proxy(edge: EdgeProcess) -> AsyncIterator[RecordingProxy]:
    proxy = RecordingProxy(edge.ws_url)
    async with serve(
        proxy.relay,
        "127.0.0.1",
        0,
        max_size=wire.MAX_SOCKET_MESSAGE_BYTES,
        compression=None,
    ) as server:
        proxy.server = server
        yield proxy


# -- comparing what two Nodes sent ---------------------------------------------------------------


def blanked(value: Any, node_id: str, key: str = "") -> Any:
    """``value`` with its node's id and the per-run, per-moment values replaced by markers."""
    if key in VOLATILE and value is not None:
        return VOLATILE[key]
    if key == "text" and isinstance(value, str):  # a chunk as its caller gets it (relay_as)
        return blanked(json.loads(value), node_id)
    if isinstance(value, dict):
        return {blanked(k, node_id): blanked(v, node_id, k) for k, v in value.items()}
    if isinstance(value, list):
        return [blanked(item, node_id) for item in value]
    if isinstance(value, str):
        return value.replace(node_id, "<node>")
    return value


def comparable(frame: dict[str, Any], node_id: str) -> dict[str, Any]:
    frame = blanked(frame, node_id)
    for (frame_type, key), reason in ALLOWED_DIFFERENCES.items():
        if frame["type"] == frame_type:
            frame[key] = f"<allowed to differ: {reason}>"
    return frame


def scripted(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The frames the script causes: keep-alive frames come on their own clock, so apart."""
    return [f for f in frames if f["type"] not in KEEPALIVE]


async def nodes_sent(proxy: RecordingProxy, at_least: dict[str, int]) -> None:
    """Wait until each node has sent at least so many frames of each type."""

    async def enough() -> bool:
        return all(
            proxy.count(node_id, NODE_TO_EDGE, frame_type) >= count
            for node_id in (AGENT, SIM)
            for frame_type, count in at_least.items()
        )

    await await_until(enough, WAIT_S, f"both nodes to have sent {at_least}")


async def edge_sent(proxy: RecordingProxy, node_id: str, frame_type: str, count: int) -> None:
    async def enough() -> bool:
        return proxy.count(node_id, EDGE_TO_NODE, frame_type) >= count

    await await_until(enough, WAIT_S, f"{count} {frame_type} frames to {node_id}")


# -- the processes -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ports() -> tuple[int, int]:
    return two_ports()


@pytest.fixture(scope="module")
def edge(
    edge_factory: Callable[..., EdgeProcess], tokens: Tokens, ports: tuple[int, int]
) -> EdgeProcess:
    return edge_factory(fleet_config(tokens, ports))


@pytest.fixture
def start_agent(edge: EdgeProcess, tokens: Tokens) -> Iterator[Callable[[str], NodeProcess]]:
    """``start_agent(ws_url)`` starts the real agent as node-a, dialing ``ws_url``."""
    started: list[NodeProcess] = []

    def start(ws_url: str) -> NodeProcess:
        agent = NodeProcess(edge.workdir, edge, AGENT, tokens.node(AGENT))
        agent.args[agent.args.index("--edge") + 1] = ws_url
        started.append(agent)
        return agent.start()

    yield start
    for agent in started:
        agent.stop()


async def refresh(edge: EdgeProcess, config: dict[str, Any]) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=30, headers=edge.operator_headers()) as operator:
        reply = await operator.post(
            f"{edge.operator_url}/refresh",
            json={"mode": "apply", "config_yaml": yaml.safe_dump(config)},
        )
    assert reply.status_code == 200, reply.text
    return reply.json()


def pushes(result: dict[str, Any]) -> dict[str, str]:
    """What each node answered a refresh's push."""
    return {push["node"]: push["status"] for push in result["node_pushes"]}


async def chat(client: httpx.AsyncClient, tokens: Tokens, model: str, *, stream: bool) -> str:
    """One call to the Edge; the reply's text."""
    body = chat_body(model, TEXT, stream=stream)
    if not stream:
        reply = await client.post("/v1/chat/completions", json=body, headers=client_headers(tokens))
        assert reply.status_code == 200, reply.text
        return reply.json()["choices"][0]["message"]["content"]
    async with client.stream(
        "POST", "/v1/chat/completions", json=body, headers=client_headers(tokens)
    ) as reply:
        assert reply.status_code == 200
        return streamed_content(sse_payloads([line async for line in reply.aiter_lines()]))


# -- the tests -----------------------------------------------------------------------------------


async def test_it_sends_what_the_real_agent_sends(
    edge: EdgeProcess,
    tokens: Tokens,
    ports: tuple[int, int],
    start_agent: Callable[[str], NodeProcess],
) -> None:
    nodes = (AGENT, SIM)
    async with (
        recording_proxy(edge) as proxy,
        httpx.AsyncClient(base_url=edge.base_url, timeout=30) as client,
    ):
        start_agent(proxy.url)
        fleet = SimulatedFleet()
        await fleet.start(proxy.url, [(SIM, tokens.node(SIM))])
        [sim] = fleet.nodes
        try:
            # Signed in: hello, ack, health; then the keep-alive of each side, on its own clock.
            assert await fleet.wait_ready(WAIT_S)
            await nodes_sent(proxy, {"provider.health": 2, "ping": 1, "pong": 1})

            first = await refresh(edge, fleet_config(tokens, ports, refreshed=True))
            assert first["status"] == "applied", first
            assert pushes(first) == ACKED
            await nodes_sent(proxy, {"provider.health": 4})

            for node_id in nodes:
                assert await chat(client, tokens, model_of(node_id), stream=True) == REPLY
                assert await chat(client, tokens, model_of(node_id), stream=False) == REPLY

            # A streamed run its client gives up on before the first (ten-second) token.
            for node_id in nodes:
                slow = model_of(node_id, slow=True)
                call = asyncio.create_task(chat(client, tokens, slow, stream=True))
                await edge_sent(proxy, node_id, "run.request", 3)
                call.cancel()
                await asyncio.gather(call, return_exceptions=True)
                await edge_sent(proxy, node_id, "run.cancel", 1)

            # The agent's run ends out of sight; the simulated node's must end too.
            async def sim_idle() -> bool:
                return sim.runs_in_flight == 0

            await await_until(sim_idle, WAIT_S, "the simulated node to drop its cancelled run")

            assert fleet.dropped == 0
            assert fleet.refresh_acks == {first["refresh_id"]: 1}
            recorded = {
                node_id: {d: proxy.sent(node_id, d) for d in (NODE_TO_EDGE, EDGE_TO_NODE)}
                for node_id in nodes
            }
        finally:
            await fleet.close()

    assert proxy.refused == []
    agent_sent, sim_sent = recorded[AGENT][NODE_TO_EDGE], recorded[SIM][NODE_TO_EDGE]

    # The Edge sent both the same script, and refused nothing from either.
    edge_types = [f["type"] for f in scripted(recorded[AGENT][EDGE_TO_NODE])]
    assert edge_types == [
        "config",
        "config.refresh",
        "run.request",
        "run.request",
        "run.request",
        "run.cancel",
    ]
    assert [f["type"] for f in scripted(recorded[SIM][EDGE_TO_NODE])] == edge_types

    # Frame for frame, the same answers: a stream of three chunks, a whole response, no event
    # at all for the cancelled run.
    agent_script = [comparable(f, AGENT) for f in scripted(agent_sent)]
    sim_script = [comparable(f, SIM) for f in scripted(sim_sent)]
    # One health report per adapter (echo, slow) as its probe answers, after each applied config.
    expected_types = ["hello"] + ["config.ack", "provider.health", "provider.health"] * 2
    expected_types += ["run.event"] * 6
    assert [f["type"] for f in agent_script] == expected_types
    assert [f["type"] for f in sim_script] == expected_types
    assert sim_script == agent_script
    assert [f["event"] for f in sim_script if f["type"] == "run.event"] == [
        "chunk",
        "chunk",
        "chunk",
        "done",
        "response",
        "done",
    ]

    # The allowed difference, as it is.
    assert agent_sent[0]["agent_version"] == AGENT_VERSION
    assert sim_sent[0]["agent_version"] == SIM_VERSION

    # Keep-alive: the same shapes (heartbeats without a ts), and each pong echoes a ping the
    # Edge sent on that session.
    for node_id in nodes:
        mine = recorded[node_id][NODE_TO_EDGE]
        keepalive = [comparable(f, node_id) for f in mine if f["type"] in KEEPALIVE]
        assert all(set(f) == {"type", "ts"} for f in keepalive)
        assert {(f["type"], f["ts"]) for f in keepalive} == {("ping", None), ("pong", "<time>")}
        edge_pings = {f["ts"] for f in recorded[node_id][EDGE_TO_NODE] if f["type"] == "ping"}
        assert {f["ts"] for f in mine if f["type"] == "pong"} <= edge_pings

    # What the simulated node recorded of its session.
    assert sim.connected_at is not None and sim.config_at is not None and sim.ready_at is not None
    assert sim.dialed_at is not None and sim.dialed_at <= sim.connected_at <= sim.config_at
    assert sim.config_at <= sim.ready_at
    assert [(a.refresh_id, a.status) for a in sim.refresh_acks] == [
        (first["refresh_id"], "applied")
    ]
    assert sim.drops == []  # the fleet closed it: not a drop


async def test_it_counts_sessions_the_edge_ends_as_dropped(
    edge: EdgeProcess, tokens: Tokens
) -> None:
    """A refused sign-in (4401) and a session a newer one supersedes (4409) are drops; neither
    node dials again (reconnect is off by default)."""
    fleet = SimulatedFleet()
    await fleet.start(
        edge.ws_url, [(SPARE, tokens.node(SPARE)), ("node-unknown", tokens.node(SPARE))]
    )
    newer = SimulatedNode(SPARE, tokens.node(SPARE))
    newer_session: asyncio.Task[None] | None = None
    try:
        # One ready, one refused, before the newer session for the ready one dials.
        assert await fleet.tally.wait_for(
            lambda: fleet.ready_count == 1 and fleet.dropped == 1, WAIT_S
        )
        newer_session = asyncio.create_task(newer.run(edge.ws_url))
        assert await fleet.tally.wait_for(lambda: fleet.dropped == 2, WAIT_S)
        assert await newer.tally.wait_for(lambda: newer.ready, WAIT_S)
    finally:
        await fleet.close()
        await newer.close()
        if newer_session is not None:
            await newer_session

    superseded, refused = fleet.nodes
    assert [d.code for d in superseded.drops] == [wire.CLOSE_SUPERSEDED]
    assert superseded.ready_at is not None
    assert [d.code for d in refused.drops] == [wire.CLOSE_UNAUTHORIZED]
    assert refused.ready_at is None and refused.config_at is None
    assert fleet.ready_count == 0
    assert newer.drops == []
