"""A run's events on their way to its reader: in order, woken, none lost to a cancelled read."""

from __future__ import annotations

import asyncio

from nodes.sessions import NodeSessionStore, RunStream
from tests.nodes.sessions.test_node_sessions import FakeLink


def open_stream() -> RunStream:
    session, _ = NodeSessionStore(lambda node, ready: None).attach("node-a", FakeLink())
    return session.open_run("r1")


async def test_a_waiting_reader_is_woken_by_each_event_in_turn() -> None:
    stream = open_stream()
    reader = asyncio.create_task(stream.next_event())
    await asyncio.sleep(0)
    assert not reader.done()

    stream.push("delta", {"n": 1})
    stream.push("delta", {"n": 2})

    assert await reader == ("delta", {"n": 1})
    assert await stream.next_event() == ("delta", {"n": 2})


async def test_an_event_pushed_after_a_read_was_cancelled_waits_for_the_next_read() -> None:
    stream = open_stream()
    reader = asyncio.create_task(stream.next_event())
    await asyncio.sleep(0)
    reader.cancel()
    await asyncio.gather(reader, return_exceptions=True)

    stream.push("done", {"usage": None})

    assert reader.cancelled()
    assert await asyncio.wait_for(stream.next_event(), 1) == ("done", {"usage": None})


async def test_drain_takes_what_has_arrived_and_a_failure_comes_after_nothing_queued() -> None:
    stream = open_stream()
    stream.push("delta", {"n": 1})
    stream.push("delta", {"n": 2})

    assert stream.drain() == [("delta", {"n": 1}), ("delta", {"n": 2})]
    assert stream.drain() == []

    stream.push("delta", {"n": 3})
    stream.fail("bad_frame", "that frame could not be read")

    event, data = await stream.next_event()
    assert (event, data["code"]) == ("error", "bad_frame")
    assert stream.drain() == []
