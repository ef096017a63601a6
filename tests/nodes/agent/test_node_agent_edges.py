"""A Node given several Edges (`--edge` repeated): it serves the one that leads, moves on from a
standby (close 4503) and from an Edge that went away, and cancels the runs it had there."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from websockets.asyncio.server import serve

from nodes import wire
from nodes.agent.agent import AgentSettings, Backoff, NodeAgent
from nodes.agent.cli import parse_settings
from nodes.agent.edges import EdgeRotation, standby_retry_delay
from tests.nodes.agent.conftest import TOKEN, WAIT_S, FakeEdge


def test_the_rotation_tries_the_next_edge_at_once_within_a_pass() -> None:
    edges = EdgeRotation(["ws://a", "ws://b", "ws://c"])

    assert edges.current == "ws://a"
    assert edges.move_on(served=False) is False
    assert edges.current == "ws://b"
    assert edges.move_on(served=False) is False
    assert edges.move_on(served=False) is True  # a whole pass found no leader: back off
    assert edges.current == "ws://a"


def test_the_rotation_tries_the_next_edge_at_once_after_a_session_ended() -> None:
    edges = EdgeRotation(["ws://a", "ws://b"])
    edges.move_on(served=False)

    assert edges.move_on(served=True) is False  # its Edge may be gone: another may lead
    assert edges.current == "ws://a"
    assert edges.move_on(served=False) is False  # a new pass began after the session
    assert edges.move_on(served=False) is True


def test_a_pass_that_met_a_standby_says_so() -> None:
    edges = EdgeRotation(["ws://a", "ws://b"])
    edges.move_on(served=False, standby=True)
    assert edges.move_on(served=False) is True
    assert edges.pass_saw_standby is True
    edges.move_on(served=False)
    edges.move_on(served=False)
    assert edges.pass_saw_standby is False  # a pass of Edges that did not answer at all
    edges.move_on(served=False, standby=True)
    edges.move_on(served=False, refused=True)  # e.g. 4409: another agent has this id
    assert edges.pass_saw_standby is False  # the backoff applies, as with one Edge


def test_the_standby_retry_is_short_and_jittered() -> None:
    assert standby_retry_delay(lambda: 0.0) == pytest.approx(0.4)
    assert standby_retry_delay(lambda: 1.0) == pytest.approx(0.6)


def test_one_edge_backs_off_after_every_attempt_as_before() -> None:
    edges = EdgeRotation(["ws://only"])

    assert [edges.move_on(served=s) for s in (False, False, True)] == [True, True, True]
    assert edges.current == "ws://only"
    with pytest.raises(ValueError, match="at least one"):
        EdgeRotation([])


def test_the_cli_takes_edge_more_than_once_in_order() -> None:
    argv = ["--edge", "ws://a:1/ws/node/", "--edge", "ws://b:2/ws/node/", "--node-id", "n"]
    settings, _ = parse_settings(argv, {"IOP_NODE_TOKEN": "t"})

    assert settings.edge_urls == ("ws://a:1/ws/node/", "ws://b:2/ws/node/")


@pytest.mark.parametrize(
    ("urls", "message"),
    [
        (["ws://a:1/ws/node/", "ws://a:1/ws/node/"], "a URL is given twice"),
        (["ws://a:1/ws/node/", "http://b/"], "--edge: "),
    ],
)
def test_the_cli_refuses_a_bad_or_repeated_edge_url(urls: list[str], message: str) -> None:
    from nodes.agent.cli import UsageError

    argv = [part for url in urls for part in ("--edge", url)] + ["--node-id", "n"]
    with pytest.raises(UsageError, match=message):
        parse_settings(argv, {"IOP_NODE_TOKEN": "t"})


@contextlib.asynccontextmanager
async def fake_edge() -> AsyncIterator[FakeEdge]:
    fake = FakeEdge()
    async with serve(fake.handler, "127.0.0.1", 0) as server:
        fake.url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/ws/node/"
        yield fake


async def standby(connection: Any) -> None:
    await connection.websocket.close(wire.CLOSE_STANDBY, "this Edge is a standby")


@contextlib.asynccontextmanager
async def agent_of(urls: list[str], **kwargs: Any) -> AsyncIterator[NodeAgent]:
    settings = AgentSettings(
        edge_url=urls[0], node_id="node-a", token=TOKEN, other_edge_urls=tuple(urls[1:])
    )
    # A long backoff: the Node must find the leader within a pass, without waiting it out.
    agent = NodeAgent(settings, backoff=Backoff(initial_s=30, cap_s=30), **kwargs)
    task = asyncio.create_task(agent.run())
    try:
        yield agent
    finally:
        agent.request_stop()
        async with asyncio.timeout(WAIT_S):
            await task


async def test_it_asks_a_cluster_between_leaders_again_soon(agent_log: Any) -> None:
    async with fake_edge() as refusing, fake_edge() as also_refusing:
        refusing.on_connect = also_refusing.on_connect = standby
        async with agent_of([refusing.url, also_refusing.url]):
            for _ in range(3):  # the backoff here is 30 s: these come after the short retry
                await refusing.next_connection()
        assert "retrying in 0." in " ".join(agent_log.messages)


async def test_it_moves_on_from_a_standby_to_the_leader_at_once(fakes: Any, agent_log: Any) -> None:
    async with fake_edge() as refusing, fake_edge() as leader:
        refusing.on_connect = standby
        async with agent_of([refusing.url, leader.url]):
            await refusing.next_connection()
            session = await leader.next_connection()
            await session.handshake(fakes.make_node())
        await agent_log.wait_for(f"{refusing.url} is a standby Edge (close 4503")
    assert "retrying in" not in " ".join(agent_log.messages)


async def test_it_follows_the_new_leader_and_cancels_the_runs_it_had(
    fakes: Any, gated: Any, agent_log: Any
) -> None:
    async with fake_edge() as first, fake_edge() as second:
        second.on_connect = standby
        async with agent_of([first.url, second.url], adapter_factory=gated):
            old = await first.next_connection()
            await old.handshake(fakes.gated_node())
            await old.send(fakes.gated_run("r1"))
            await old.expect("run.event", run_id="r1")
            # The leader goes away mid-run; the other Edge has taken over by now.
            second.on_connect = None
            first.on_connect = standby
            await old.websocket.close(1011, "gone")
            new = await second.next_connection()
            await new.handshake(fakes.gated_node())
            async with asyncio.timeout(WAIT_S):
                await gated.built[0].cleaned_up.wait()
            assert not gated.built[0].release.is_set()  # cancelled, not run to its end
            await agent_log.wait_for("session ended: cancelling 1 running run(s)")
            # The new leader got no event of the old run: nobody reads it there.
            await new.round_trip(1.0)
            assert not [f for f in new.frames if f.get("run_id") == "r1"]
