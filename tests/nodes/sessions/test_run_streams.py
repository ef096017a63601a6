"""A run's events on their way to its task: a failure drops what was queued and comes next."""

from __future__ import annotations

from nodes.sessions import RunStream
from tests.nodes.sessions.test_node_sessions import FakeLink, make_store


def open_stream() -> RunStream:
    store, _ = make_store()
    session, _ = store.attach("node-a", FakeLink())
    return session.open_run("r1")


async def test_events_come_in_order_and_drain_takes_what_has_arrived() -> None:
    stream = open_stream()
    stream.push("delta", {"n": 1})
    stream.push("delta", {"n": 2})
    stream.push("done", {"usage": None})

    assert await stream.next_event() == ("delta", {"n": 1})
    assert stream.drain() == [("delta", {"n": 2}), ("done", {"usage": None})]


async def test_a_failure_drops_what_was_queued_and_comes_next() -> None:
    stream = open_stream()
    stream.push("delta", {"n": 1})

    stream.fail("bad_frame", "that frame could not be read")

    event, data = await stream.next_event()
    assert (event, data["code"]) == ("error", "bad_frame")
    assert stream.drain() == []
