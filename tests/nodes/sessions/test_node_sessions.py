from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nodes import wire
from nodes.sessions import (
    BAD_FRAME,
    NODE_DISCONNECTED,
    RECENT_RUNS_KEPT,
    REQUEST_TOO_LARGE,
    NodeSessionStore,
)


class FakeLink:
    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []
        self.closed_with: int | None = None

    async def send_frame(self, frame: Any) -> None:
        wire.split(frame)  # as the consumer does: a frame too large even in parts is refused
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


async def test_a_held_config_push_goes_out_ahead_of_any_frame_sent_after_it() -> None:
    store, _ = make_store()
    link = FakeLink()
    session, _ = store.attach("node-a", link)
    session.hold_config(lambda: wire.config_refresh("rf-1", "sha256:new", {"id": "node-a"}))

    await session.send(wire.run_cancel("r1"))  # a frame sent before the push's turn came
    await session.send_held_config()  # its turn: already sent

    assert [frame["type"] for frame in link.frames] == ["config.refresh", "run.cancel"]


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


async def sent(link: FakeLink, frame_type: str) -> dict[str, Any]:
    """The first frame of ``frame_type`` the session sent, once it has (sends run as tasks)."""
    async with asyncio.timeout(1):
        while True:
            for frame in link.frames:
                if frame["type"] == frame_type:
                    return frame
            await asyncio.sleep(0)


def queued(session: Any, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    return session.runs[run_id].drain() if run_id in session.runs else []


CHUNK = {"choices": [{"index": 0, "delta": {"content": "x"}}]}


async def test_a_run_past_the_output_limit_fails_its_queue_is_dropped_and_it_is_cancelled() -> None:
    store, _ = make_store()
    link = FakeLink()
    session, _ = store.attach("node-a", link, max_run_output_bytes=100)
    stream = session.open_run("r1")
    other = session.open_run("r2")

    assert session.deliver("r1", "delta", CHUNK, 60)
    assert session.deliver("r1", "delta", CHUNK, 60)  # 120 > 100

    assert stream.drain() == [
        (
            "error",
            {
                "code": wire.ERROR_OUTPUT_TOO_LARGE,
                "message": "the run's output exceeded the Edge's limit of 100 bytes",
                "status": None,
            },
        )
    ]
    assert await sent(link, "run.cancel") == wire.run_cancel("r1")
    # Its late events are dropped quietly; the other run and the session go on.
    assert session.deliver("r1", "delta", CHUNK, 10)
    assert stream.drain() == []
    assert session.deliver("r2", "delta", CHUNK, 90)
    assert other.drain() == [("delta", CHUNK)]
    assert not session.closed


def parts_of(frame: wire.Frame, max_bytes: int = 200) -> list[wire.Part]:
    parts = [wire.decode(text) for text in wire.split(frame, max_bytes=max_bytes)]
    assert len(parts) > 1 and all(p["type"] == "part" for p in parts)
    return parts  # type: ignore[return-value]


async def test_a_large_event_in_parts_reaches_its_run_whole() -> None:
    store, _ = make_store()
    session, _ = store.attach("node-a", FakeLink())
    stream = session.open_run("r1")
    completion = {"object": "chat.completion", "choices": [{"message": {"content": "y" * 900}}]}

    for part in parts_of(wire.run_response("r1", completion)):
        assert session.take_part(part)

    assert stream.drain() == [("response", completion)]


async def test_parts_count_toward_the_output_limit_as_they_arrive() -> None:
    store, _ = make_store()
    link = FakeLink()
    session, _ = store.attach("node-a", link, max_run_output_bytes=300)
    stream = session.open_run("r1")
    parts = parts_of(wire.run_response("r1", {"content": "z" * 2000}))

    for part in parts:
        assert session.take_part(part)

    assert [event for event, _ in stream.drain()] == ["error"]
    assert (await sent(link, "run.cancel"))["run_id"] == "r1"


async def test_parts_that_make_a_bad_frame_fail_that_run_only() -> None:
    store, _ = make_store()
    link = FakeLink()
    session, _ = store.attach("node-a", link)
    stream = session.open_run("r1")
    first, *rest = parts_of(wire.run_delta("r1", {"content": "w" * 900}))
    broken: wire.Part = {**first, "data": "{broken" + first["data"]}

    for part in [broken, *rest[:-1]]:
        assert session.take_part(part)
    with pytest.raises(wire.FrameError):
        session.take_part(rest[-1])

    event, data = stream.drain()[0]
    assert (event, data["code"]) == ("error", BAD_FRAME)
    assert "not valid JSON" in data["message"]
    assert (await sent(link, "run.cancel"))["run_id"] == "r1"
    assert session.take_part(rest[-1])  # late parts of the failed run go quietly
    assert not session.closed


async def test_a_whole_frame_abandons_the_frame_the_node_was_splitting() -> None:
    store, _ = make_store()
    session, _ = store.attach("node-a", FakeLink())
    stream = session.open_run("r1")
    first, *_ = parts_of(wire.run_delta("r1", {"content": "v" * 900}))
    error = {"code": "node_draining", "message": "run cut short", "status": None}

    assert session.take_part(first)
    assert session.deliver("r1", "error", error)
    assert stream.drain() == [("error", error)]

    # A new frame in parts for the run starts afresh.
    for part in parts_of(wire.run_delta("r1", {"content": "u" * 900})):
        session.take_part(part)
    assert stream.drain() == [("delta", {"content": "u" * 900})]


async def test_parts_for_runs_it_does_not_own_are_refused() -> None:
    store, _ = make_store()
    session, _ = store.attach("node-a", FakeLink())
    session.open_run("ended")
    session.forget_run("ended", unfinished=True)
    part: wire.Part = {"type": "part", "run_id": "nobody", "data": "{", "more": True}

    assert not session.take_part(part)
    assert session.take_part({**part, "run_id": "ended"})
    assert session.owns("ended") and not session.owns("nobody")


async def test_a_run_request_too_large_even_in_parts_fails_its_run_before_anything_is_sent() -> (
    None
):
    store, _ = make_store()
    link = FakeLink()
    session, _ = store.attach("node-a", link)
    stream = session.open_run("r1")
    huge = {"messages": [{"role": "user", "content": "x" * (wire.MAX_MESSAGE_BYTES + 1)}]}

    await session.send(wire.run_request("r1", "p", "a", "m", huge, 0.0))

    event, data = stream.drain()[0]
    assert (event, data["code"]) == ("error", REQUEST_TOO_LARGE)
    assert "message limit" in data["message"]
    assert link.frames == []  # not even a cancel: the Node never heard of it
    assert "r1" not in session.runs


async def test_other_frames_too_large_to_send_raise() -> None:
    store, _ = make_store()
    session, _ = store.attach("node-a", FakeLink())
    node: Any = {"id": "node-a", "padding": "x" * (2 * wire.MAX_FRAME_BYTES)}

    with pytest.raises(wire.FrameError):
        await session.send(wire.config("sha256:1", node))
