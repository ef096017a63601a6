from __future__ import annotations

import asyncio
from typing import Any

import pytest

from edge.config import load_config_text
from edge.runs import DEADLINE_EXCEEDED, RunFailed, open_run
from edge.runtime import EdgeRuntime
from nodes.sessions import NODE_DISCONNECTED, NodeSession

Events = list[tuple[str, dict[str, Any]]]
DONE = {
    "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
    "finish_reason": "stop",
}


class FakeLink:
    """A Node that answers every run.request with ``events`` (none: it stays silent)."""

    def __init__(self, events: Events) -> None:
        self.frames: list[dict[str, Any]] = []
        self.sent = asyncio.Event()
        self.events = events
        self.session: NodeSession | None = None

    async def send_frame(self, frame: Any) -> None:
        self.frames.append(dict(frame))
        self.sent.set()
        if frame["type"] == "run.request":
            for event, data in self.events:
                asyncio.get_running_loop().call_soon(
                    self.session.deliver, frame["run_id"], event, data
                )

    async def close_session(self, code: int) -> None:
        pass


CONFIG = """
version: 1
edge: {id: e}
nodes:
  - id: node-a
    token_hash_sha256: "%s"
    adapters: [{id: echo, type: echo}]
    providers:
      - {id: p1, adapter: echo, served_models: [small], capacity: 1}
models:
  - {id: m, providers: {p1: small}, generation: {default_max_tokens: 5}}
""" % ("a" * 64)


async def noop_writer(batch: list[Any]) -> None:
    return None


def make_runtime(events: Events | None = None) -> tuple[EdgeRuntime, FakeLink]:
    runtime = EdgeRuntime(load_config_text(CONFIG), None, noop_writer)
    link = FakeLink(events or [])
    link.session, _ = runtime.nodes.attach("node-a", link)
    runtime.nodes.mark_ready(link.session, runtime.config.revision)
    return runtime, link


def in_flight(runtime: EdgeRuntime) -> int:
    return runtime.pool.stats().providers["p1"].in_flight


REQUEST = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


async def test_it_sends_the_run_to_the_leased_node_and_relays_its_events() -> None:
    runtime, link = make_runtime([("delta", {"choices": []}), ("done", DONE)])

    async with open_run(runtime, "m", REQUEST, 10, timeout_s=5) as run:
        frame = link.frames[-1]
        assert frame["type"] == "run.request"
        assert (frame["provider_id"], frame["adapter_id"], frame["target"]) == (
            "p1",
            "echo",
            "small",
        )
        assert frame["request"]["model"] == "small"
        assert in_flight(runtime) == 1
        deltas = [chunk async for chunk in run.deltas()]

    assert deltas == [{"choices": []}]
    assert run.status == "ok" and run.finish_reason == "stop"
    assert in_flight(runtime) == 0
    assert [f["type"] for f in link.frames] == ["run.request"]  # nothing to cancel


async def test_it_cancels_the_run_on_the_node_when_the_caller_leaves() -> None:
    runtime, link = make_runtime()

    async def caller() -> None:
        async with open_run(runtime, "m", REQUEST, 10, timeout_s=5) as run:
            async for _ in run.deltas():
                pass

    task = asyncio.create_task(caller())
    await asyncio.wait_for(link.sent.wait(), 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    run_id = link.frames[0]["run_id"]
    assert link.frames[-1] == {"type": "run.cancel", "run_id": run_id}
    assert in_flight(runtime) == 0


async def test_it_fails_with_node_disconnected_when_the_node_goes() -> None:
    runtime, _ = make_runtime([("delta", {"choices": []})])

    with pytest.raises(RunFailed) as failure:
        async with open_run(runtime, "m", REQUEST, 10, timeout_s=5) as run:
            runtime.nodes.detach(run.session)
            async for _ in run.deltas():
                pass

    assert failure.value.code == NODE_DISCONNECTED
    assert in_flight(runtime) == 0


async def test_it_relays_an_upstream_error_with_its_status() -> None:
    runtime, _ = make_runtime(
        [("error", {"code": "upstream_error", "message": "boom", "status": 500})]
    )

    with pytest.raises(RunFailed) as failure:
        async with open_run(runtime, "m", REQUEST, 10, timeout_s=5) as run:
            async for _ in run.deltas():
                pass

    assert (failure.value.code, failure.value.upstream_status) == ("upstream_error", 500)
    assert run.status == "upstream_error"
    assert in_flight(runtime) == 0


async def test_it_gives_up_at_the_deadline_and_cancels_the_run() -> None:
    runtime, link = make_runtime()

    with pytest.raises(RunFailed) as failure:
        async with open_run(runtime, "m", REQUEST, 10, timeout_s=0.05) as run:
            async for _ in run.deltas():
                pass

    assert failure.value.code == DEADLINE_EXCEEDED
    assert link.frames[-1]["type"] == "run.cancel"
    assert in_flight(runtime) == 0


async def test_it_fails_when_the_leased_node_is_not_connected() -> None:
    runtime, _ = make_runtime()
    session = runtime.nodes.get("node-a")
    runtime.nodes.detach(session)
    runtime.pool.set_node_ready("node-a", True)  # the pool still believes it: a race

    with pytest.raises(RunFailed) as failure:
        async with open_run(runtime, "m", REQUEST, 10, timeout_s=5):
            pass

    assert failure.value.code == NODE_DISCONNECTED
    assert in_flight(runtime) == 0


async def test_a_queued_run_granted_just_before_a_swap_asks_again():
    runtime, link = make_runtime([("done", DONE)])
    moved = CONFIG.replace("- {id: p1,", "- {id: p2,").replace("{p1: small}", "{p2: small}")
    first = open_run(runtime, "m", REQUEST, 10, timeout_s=5)
    held = await first.__aenter__()
    second_block = open_run(runtime, "m", REQUEST, 10, timeout_s=5)
    second = asyncio.create_task(second_block.__aenter__())
    await asyncio.sleep(0)  # the second request now waits in the queue

    async for _ in held.deltas():
        pass
    await first.__aexit__(None, None, None)  # frees p1's slot for the waiter ...
    runtime.swap_config(load_config_text(moved))  # ... and p1 is gone before it wakes
    run = await asyncio.wait_for(second, 1)

    assert run.lease.provider_id == "p2"
    requests = [f for f in link.frames if f["type"] == "run.request"]
    assert [f["provider_id"] for f in requests] == ["p1", "p2"], link.frames
    await second_block.__aexit__(None, None, None)
    assert runtime.pool.stats().providers["p2"].in_flight == 0


TWO_NODES = f"""
version: 1
edge: {{id: e}}
nodes:
  - id: node-a
    token_hash_sha256: "{"a" * 64}"
    adapters: [{{id: echo, type: echo}}]
    providers: [{{id: p1, adapter: echo, served_models: [small], capacity: 1, priority: 1}}]
  - id: node-b
    token_hash_sha256: "{"b" * 64}"
    adapters: [{{id: echo, type: echo}}]
    providers: [{{id: p2, adapter: echo, served_models: [small], capacity: 1, priority: 2}}]
models:
  - {{id: m, providers: {{p1: small, p2: small}}}}
"""
DRAINING = ("error", {"code": "node_draining", "message": "node is draining"})


def make_two_nodes(first: Events, second: Events) -> tuple[EdgeRuntime, FakeLink, FakeLink]:
    runtime = EdgeRuntime(load_config_text(TWO_NODES), None, noop_writer)
    links = FakeLink(first), FakeLink(second)
    for node_id, link in zip(("node-a", "node-b"), links, strict=True):
        link.session, _ = runtime.nodes.attach(node_id, link)
        runtime.nodes.mark_ready(link.session, runtime.config.revision)
    return runtime, *links


async def test_a_run_a_draining_node_refused_goes_once_more_to_another_provider() -> None:
    runtime, draining, healthy = make_two_nodes(
        [DRAINING], [("delta", {"choices": []}), ("done", DONE)]
    )
    attempts: list[str] = []

    async with open_run(
        runtime,
        "m",
        REQUEST,
        10,
        timeout_s=5,
        on_attempt=lambda lease: attempts.append(lease.provider_id),
    ) as run:
        assert run.lease.provider_id == "p2"
        deltas = [chunk async for chunk in run.deltas()]

    assert deltas == [{"choices": []}] and run.status == "ok"
    assert attempts == ["p1", "p2"]
    stats = runtime.pool.stats().providers
    assert not stats["p1"].healthy  # until its Node reports again
    assert (stats["p1"].in_flight, stats["p2"].in_flight) == (0, 0)
    assert [f["type"] for f in draining.frames] == ["run.request"]  # a refusal needs no cancel
    first, second = draining.frames[0], healthy.frames[0]
    assert abs(first["deadline"] - second["deadline"]) < 0.05  # one deadline for every attempt


async def test_a_second_refusal_is_the_callers_failure() -> None:
    runtime, first, second = make_two_nodes([DRAINING], [DRAINING])

    with pytest.raises(RunFailed) as failure:
        async with open_run(runtime, "m", REQUEST, 10, timeout_s=5) as run:
            async for _ in run.deltas():
                pass

    assert failure.value.code == "node_draining"
    assert (len(first.frames), len(second.frames)) == (1, 1)
    stats = runtime.pool.stats().providers
    assert (stats["p1"].in_flight, stats["p2"].in_flight) == (0, 0)
