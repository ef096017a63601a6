"""The agent's reconnect loop and drain, against a real websocket server playing the Edge."""

from __future__ import annotations

import asyncio
from http import HTTPStatus
from typing import Any

import pytest
from websockets.asyncio.server import serve

from nodes import wire
from nodes.agent import agent as agent_module
from nodes.agent.agent import AgentSettings, Backoff, NodeAgent
from nodes.wire import pacing


class RecordingBackoff(Backoff):
    def __init__(self) -> None:
        super().__init__(initial_s=0.01, cap_s=0.05)
        self.calls: list[str] = []

    def next_delay(self) -> float:
        self.calls.append("next")
        return super().next_delay()

    def reset(self) -> None:
        self.calls.append("reset")
        super().reset()


def close_with(code: int) -> Any:
    async def close(connection: Any) -> None:
        await connection.websocket.close(code, wire.CLOSE_REASONS.get(code, "bye"))

    return close


DRAINING = {"healthy": False, "detail": "node draining"}


def test_backoff_grows_exponentially_to_its_cap_and_resets() -> None:
    backoff = Backoff(initial_s=0.5, cap_s=4.0, rand=lambda: 0.5)  # 0.5: no jitter
    assert [backoff.next_delay() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    backoff.reset()
    assert backoff.next_delay() == 0.5


@pytest.mark.parametrize(("rand", "delay"), [(0.0, 0.8), (1.0, 1.2)])
def test_backoff_jitters_each_delay_by_up_to_a_fifth(rand: float, delay: float) -> None:
    backoff = Backoff(initial_s=1.0, cap_s=30.0, rand=lambda: rand)
    assert backoff.next_delay() == pytest.approx(delay)


def test_backoff_jitter_never_passes_the_cap() -> None:
    backoff = Backoff(initial_s=30.0, cap_s=30.0, rand=lambda: 1.0)
    assert backoff.next_delay() == 30.0


async def test_it_keeps_retrying_with_backoff_when_refused_4401(
    edge: Any, start_agent: Any, agent_log: Any
) -> None:
    edge.on_connect = close_with(wire.CLOSE_UNAUTHORIZED)
    backoff = RecordingBackoff()
    async with start_agent(backoff=backoff):
        for _ in range(3):
            await edge.next_connection()
        await agent_log.wait_for("refused by edge: close 4401 (unauthorized)")
        await agent_log.wait_for("retrying in ")
    assert "reset" not in backoff.calls
    assert backoff.calls.count("next") >= 2


async def test_it_logs_an_http_refusal_at_the_handshake(agent_log: Any) -> None:
    def forbid(connection: Any, request: Any) -> Any:
        return connection.respond(HTTPStatus.FORBIDDEN, "no\n")

    async with serve(lambda ws: None, "127.0.0.1", 0, process_request=forbid) as server:
        port = server.sockets[0].getsockname()[1]
        settings = AgentSettings(f"ws://127.0.0.1:{port}/ws/node/", "node-a", "t")
        agent = NodeAgent(settings, backoff=Backoff(initial_s=0.01, cap_s=0.05))
        task = asyncio.create_task(agent.run())
        await agent_log.wait_for("refused by edge: HTTP 403 at handshake")
        agent.request_stop()
        async with asyncio.timeout(5):
            await task


async def test_stop_does_not_wait_out_a_hanging_handshake() -> None:
    reached = asyncio.Event()

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reached.set()
        await reader.read()  # never answers the upgrade request
        writer.close()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    async with server:
        port = server.sockets[0].getsockname()[1]
        settings = AgentSettings(f"ws://127.0.0.1:{port}/ws/node/", "node-a", "t")
        agent = NodeAgent(settings)  # open_timeout_s is 10 s
        task = asyncio.create_task(agent.run())
        async with asyncio.timeout(5):
            await reached.wait()
        agent.request_stop()
        async with asyncio.timeout(2):
            await task


async def test_it_resets_backoff_after_ready_unless_superseded(
    edge: Any, start_agent: Any, fakes: Any, agent_log: Any
) -> None:
    backoff = RecordingBackoff()
    async with start_agent(backoff=backoff):
        first = await edge.next_connection()
        await first.handshake(fakes.make_node())
        await first.websocket.close(1012, "edge restarting")

        second = await edge.next_connection()
        await second.handshake(fakes.make_node())
        await second.websocket.close(wire.CLOSE_SUPERSEDED, "superseded")

        await edge.next_connection()
        superseded = await agent_log.wait_for("superseded by edge: close 4409")
    assert backoff.calls[:3] == ["reset", "next", "next"]
    assert "is another agent running as node node-a?" in superseded


async def test_it_reconnects_and_says_hello_again_after_a_drop(
    edge: Any, start_agent: Any, fakes: Any
) -> None:
    async with start_agent():
        first = await edge.next_connection()
        await first.handshake(fakes.make_node())
        first.websocket.transport.abort()  # no closing handshake: a network drop
        second = await edge.next_connection()
        await second.handshake(fakes.make_node())
        await second.send(fakes.run_request("r1"))
        await second.expect("run.event", run_id="r1", event="done")


async def test_its_websocket_keepalive_pings_on_an_interval_of_its_own(
    edge: Any, start_agent: Any, fakes: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nodes that connect together must not ping together (nodes.wire.pacing): each
    connection's keepalive interval is drawn when it opens."""
    monkeypatch.setattr(pacing.random, "uniform", lambda low, high: high)  # the longest draw
    intervals: list[float] = []
    real_connect = agent_module.connect

    def connect(*args: Any, **kwargs: Any) -> Any:
        intervals.append(kwargs["ping_interval"])
        return real_connect(*args, **kwargs)

    monkeypatch.setattr(agent_module, "connect", connect)
    async with start_agent():
        first = await edge.next_connection()
        await first.handshake(fakes.make_node())
        first.websocket.transport.abort()
        second = await edge.next_connection()
        await second.handshake(fakes.make_node())

    longest = pacing.KEEPALIVE_PING_S * (1 + pacing.KEEPALIVE_PING_SPREAD)
    assert intervals == [longest, longest]


async def test_stop_drains_running_runs_then_closes(
    edge: Any, start_agent: Any, fakes: Any, gated: Any
) -> None:
    async with start_agent(adapter_factory=gated) as agent:
        connection = await edge.next_connection()
        await connection.handshake(fakes.gated_node())
        await connection.send(fakes.gated_run("r1"))
        await connection.expect("run.event", run_id="r1", event="delta")

        agent.request_stop()
        await connection.expect(
            "provider.health", providers={"p-echo": DRAINING, "p-gated": DRAINING}
        )
        await connection.send(fakes.run_request("late"))
        late = await connection.expect("run.event", run_id="late")
        assert late["data"]["code"] == "node_draining"

        gated.built[0].release.set()
        await connection.expect("run.event", run_id="r1", event="done")
        await fakes.wait(connection.closed)
    assert connection.websocket.close_code == 1001


async def test_drain_cuts_runs_short_after_the_grace_period(
    edge: Any, start_agent: Any, fakes: Any, gated: Any
) -> None:
    async with start_agent(adapter_factory=gated, drain_timeout_s=0.1) as agent:
        connection = await edge.next_connection()
        await connection.handshake(fakes.gated_node())
        await connection.send(fakes.gated_run("r1"))
        await connection.expect("run.event", run_id="r1", event="delta")
        agent.request_stop()
        error = await connection.expect("run.event", run_id="r1", event="error")
        await fakes.wait(connection.closed)
        await fakes.wait(gated.built[0].cleaned_up)
    assert error["data"]["code"] == "node_draining"


async def test_a_second_stop_ends_the_grace_period_at_once(
    edge: Any, start_agent: Any, fakes: Any, gated: Any
) -> None:
    async with start_agent(adapter_factory=gated, drain_timeout_s=60) as agent:
        connection = await edge.next_connection()
        await connection.handshake(fakes.gated_node())
        await connection.send(fakes.gated_run("r1"))
        await connection.expect("run.event", run_id="r1", event="delta")
        agent.request_stop()
        await connection.expect(
            "provider.health", providers={"p-echo": DRAINING, "p-gated": DRAINING}
        )
        agent.request_stop()
        error = await connection.expect("run.event", run_id="r1", event="error")
        await fakes.wait(connection.closed)
    assert error["data"]["message"] == "run cut short: node shut down"


def test_backoff_stays_at_its_cap_however_long_the_edge_is_away() -> None:
    backoff = Backoff(initial_s=0.5, cap_s=30, rand=lambda: 0.5)

    delays = [backoff.next_delay() for _ in range(5000)]

    assert delays[-1] == 30 and max(delays) == 30
