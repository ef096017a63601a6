from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nodes.sessions import NODE_DISCONNECTED, RECENT_RUNS_KEPT, NodeSessionStore


class FakeLink:
    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []
        self.closed_with: int | None = None

    async def send_frame(self, frame: Any) -> None:
        self.frames.append(dict(frame))

    async def close_session(self, code: int) -> None:
        self.closed_with = code


def make_store() -> tuple[NodeSessionStore, list[tuple[str, bool]]]:
    changes: list[tuple[str, bool]] = []
    return NodeSessionStore(lambda node, ready: changes.append((node, ready))), changes


async def test_it_tells_the_pool_when_a_node_becomes_ready_and_goes() -> None:
    store, changes = make_store()
    session, superseded = store.attach("node-a", FakeLink())
    assert superseded is None and store.ready("node-a") is None

    store.mark_ready(session, "sha256:1")
    assert store.ready("node-a") is session and session.acked_revision == "sha256:1"

    store.detach(session)
    assert changes == [("node-a", True), ("node-a", False)]
    assert store.get("node-a") is None


async def test_it_fails_every_run_of_a_session_that_goes_away() -> None:
    store, _ = make_store()
    session, _ = store.attach("node-a", FakeLink())
    stream = session.open_run("r1")

    store.detach(session)

    event, data = await asyncio.wait_for(stream.next_event(), 1)
    assert (event, data["code"]) == ("error", NODE_DISCONNECTED)


async def test_it_supersedes_an_older_session_and_fails_its_runs() -> None:
    store, changes = make_store()
    old, _ = store.attach("node-a", FakeLink())
    store.mark_ready(old, "sha256:1")
    stream = old.open_run("r1")

    new, superseded = store.attach("node-a", FakeLink())

    assert superseded is old and old.closed and store.get("node-a") is new
    assert (await stream.next_event())[1]["code"] == NODE_DISCONNECTED
    # The new session is not ready until it acks its config.
    assert changes == [("node-a", True), ("node-a", False)]
    store.detach(old)  # the old socket closing later changes nothing
    assert store.get("node-a") is new and changes[-1] == ("node-a", False)


async def test_it_delivers_only_to_runs_the_session_owns() -> None:
    store, _ = make_store()
    session, _ = store.attach("node-a", FakeLink())
    stream = session.open_run("r1")

    assert session.deliver("r1", "delta", {"x": 1})
    assert await stream.next_event() == ("delta", {"x": 1})
    assert not session.deliver("someone-elses-run", "delta", {})


async def test_it_drops_late_events_of_runs_it_recently_ended() -> None:
    store, _ = make_store()
    session, _ = store.attach("node-a", FakeLink())
    for index in range(RECENT_RUNS_KEPT + 1):
        session.open_run(f"r{index}")
        session.forget_run(f"r{index}", unfinished=True)

    assert session.deliver(f"r{RECENT_RUNS_KEPT}", "delta", {})  # late, dropped quietly
    assert not session.deliver("r0", "delta", {})  # too old to remember: refused


async def test_it_resolves_refresh_acks_by_refresh_id() -> None:
    store, _ = make_store()
    session, _ = store.attach("node-a", FakeLink())
    ack = session.expect_ack("rf-1")

    assert not session.resolve_ack({"refresh_id": "rf-other", "status": "applied"})
    assert session.resolve_ack({"refresh_id": "rf-1", "status": "applied", "revision": "r"})
    assert (await ack.wait(1))["status"] == "applied"


async def test_it_forgets_an_ack_that_came_too_late() -> None:
    store, _ = make_store()
    session, _ = store.attach("node-a", FakeLink())
    ack = session.expect_ack("rf-1")

    with pytest.raises(TimeoutError):
        await ack.wait(0.01)

    assert not session.resolve_ack({"refresh_id": "rf-1", "status": "applied", "revision": "r"})


async def test_it_fails_pending_acks_when_the_session_goes() -> None:
    store, _ = make_store()
    session, _ = store.attach("node-a", FakeLink())
    ack = session.expect_ack("rf-1")

    store.detach(session)

    with pytest.raises(ConnectionError):
        await ack.wait(1)


async def test_it_refuses_events_after_a_run_finished_normally() -> None:
    store, _ = make_store()
    session, _ = store.attach("node-a", FakeLink())
    session.open_run("r1")
    session.forget_run("r1", unfinished=False)  # its done arrived: nothing more may come

    assert not session.deliver("r1", "delta", {})
