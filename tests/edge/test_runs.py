"""The run service with fake Node links: relaying, cancelling, deadlines, failover, outcomes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from edge.config import load_config_text
from edge.dispatch import NoProviderAvailable
from edge.runs import (
    DEADLINE_EXCEEDED,
    UPSTREAM_AUTH_FAILED,
    RunFailed,
    complete_run,
    may_go_elsewhere,
    open_run,
)
from edge.runtime import EdgeRuntime
from nodes import wire
from nodes.sessions import NODE_DISCONNECTED, NodeSession
from tests.edge.dispatch.pool_helpers import wait_until

Events = list[tuple[str, dict[str, Any]]]
DONE = {
    "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
    "finish_reason": "stop",
}
DELTA = {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]}
ANSWER: Events = [("delta", DELTA), ("done", DONE)]
GONE = "gone"  # a scripted "event": the Node's session drops here


class FakeLink:
    """A Node that answers every run.request with ``events`` (none: it stays silent)."""

    def __init__(self, events: Events) -> None:
        self.frames: list[dict[str, Any]] = []
        self.sent = asyncio.Event()
        self.events = events
        self.session: NodeSession | None = None
        self.store: Any = None

    @property
    def requests(self) -> list[dict[str, Any]]:
        return [f for f in self.frames if f["type"] == "run.request"]

    async def send_frame(self, frame: Any) -> None:
        self.frames.append(dict(frame))
        self.sent.set()
        if frame["type"] == "run.request":
            loop = asyncio.get_running_loop()
            for event, data in self.events:
                if event == GONE:
                    loop.call_soon(self.store.detach, self.session)
                else:
                    loop.call_soon(self.session.deliver, frame["run_id"], event, data)

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
    runtime = EdgeRuntime(load_config_text(CONFIG), None, noop_writer, noop_writer)
    link = FakeLink(events or [])
    link.store = runtime.nodes
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
    assert (run.attempts, run.tried, run.finish_sent) == (1, ("p1",), False)
    assert in_flight(runtime) == 0
    assert [f["type"] for f in link.frames] == ["run.request"]  # nothing to cancel


async def test_it_keeps_the_usage_details_and_that_the_finish_was_relayed() -> None:
    usage = {
        "prompt_tokens": 3,
        "completion_tokens": 2,
        "total_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 1},
        "completion_tokens_details": {"reasoning_tokens": 1},
    }
    done = {"usage": usage, "finish_reason": "length", "finish_sent": True}
    runtime, _ = make_runtime([("delta", DELTA), ("done", done)])

    async with open_run(runtime, "m", REQUEST, 10, timeout_s=5) as run:
        async for _ in run.delta_batches():
            pass

    assert (run.usage, run.finish_reason, run.finish_sent) == (usage, "length", True)


CHUNK_TEXT = '{"id":"chatcmpl-1","model":"m","choices":[]}'


async def test_a_run_asking_relay_as_says_so_and_gets_its_chunks_texts() -> None:
    relay_as: wire.RelayAs = {"id": "chatcmpl-1", "model": "m"}
    # A Node older than relay_as sends dicts still: both reach the caller, in order.
    runtime, link = make_runtime(
        [("chunk", {"text": CHUNK_TEXT}), ("delta", DELTA), ("done", DONE)]
    )

    async with open_run(runtime, "m", REQUEST, 10, timeout_s=5, relay_as=relay_as) as run:
        batches = [batch async for batch in run.delta_batches()]

    assert link.requests[0]["relay_as"] == relay_as
    assert [chunk for batch in batches for chunk in batch] == [CHUNK_TEXT, DELTA]
    assert run.status == "ok"


async def test_a_chunk_text_the_run_did_not_ask_for_fails_it() -> None:
    runtime, link = make_runtime([("chunk", {"text": CHUNK_TEXT}), ("done", DONE)])

    with pytest.raises(RunFailed) as caught:
        await complete_run(runtime, "m", REQUEST, 10, timeout_s=5)

    assert "relay_as" not in link.requests[0]
    assert caught.value.code == wire.ERROR_INTERNAL
    assert "chunk text" in caught.value.message
    assert in_flight(runtime) == 0


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


async def test_a_node_going_away_mid_stream_ends_the_stream() -> None:
    runtime, _ = make_runtime([("delta", DELTA)])

    with pytest.raises(RunFailed) as failure:
        async with open_run(runtime, "m", REQUEST, 10, timeout_s=5) as run:
            runtime.nodes.detach(run.session)
            async for _ in run.deltas():
                pass

    assert failure.value.code == NODE_DISCONNECTED
    assert in_flight(runtime) == 0


async def test_a_failure_with_no_other_provider_is_raised_with_what_the_upstream_said() -> None:
    error = {
        "code": "upstream_error",
        "message": "upstream HTTP 503: busy",
        "status": 503,
        "retry_after": 2.0,
        "upstream_code": "overloaded",
    }
    runtime, link = make_runtime([("error", error)])

    with pytest.raises(RunFailed) as failure:
        async with open_run(runtime, "m", REQUEST, 10, timeout_s=5):
            pass

    got = failure.value
    assert (got.code, got.status, got.retry_after, got.upstream_code) == (
        "upstream_error",
        503,
        2.0,
        "overloaded",
    )
    assert (got.attempts, got.tried) == (1, ("p1",))
    assert len(link.requests) == 1
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
    runtime.swap_config(
        runtime.prepare(load_config_text(moved))
    )  # ... and p1 is gone before it wakes
    run = await asyncio.wait_for(second, 1)

    assert run.lease.provider_id == "p2"
    assert [f["provider_id"] for f in link.requests] == ["p1", "p2"], link.frames
    await second_block.__aexit__(None, None, None)
    assert runtime.pool.stats().providers["p2"].in_flight == 0


# -- failover -------------------------------------------------------------------------------

NODES = ("node-a", "node-b", "node-c")


def several(count: int, extra: str = "") -> str:
    """``count`` providers p1..pN, one per Node, lower numbers first (priority)."""
    nodes = "".join(
        f"""
  - id: {node}
    token_hash_sha256: "{letter * 64}"
    adapters: [{{id: echo, type: echo}}]
    providers: [{{id: p{i}, adapter: echo, served_models: [small], capacity: 1, priority: {i}}}]"""
        for i, (node, letter) in enumerate(zip(NODES[:count], "abc"[:count], strict=True), start=1)
    )
    routes = ", ".join(f"p{i}: small" for i in range(1, count + 1))
    return f"""
version: 1
edge: {{id: e}}
{extra}
nodes:{nodes}
models:
  - {{id: m, providers: {{{routes}}}}}
"""


def make_nodes(*scripts: Events, extra: str = "") -> tuple[EdgeRuntime, list[FakeLink]]:
    config = load_config_text(several(len(scripts), extra))
    runtime = EdgeRuntime(config, None, noop_writer, noop_writer)
    links = [FakeLink(script) for script in scripts]
    for node_id, link in zip(NODES, links, strict=False):
        link.store = runtime.nodes
        link.session, _ = runtime.nodes.attach(node_id, link)
        runtime.nodes.mark_ready(link.session, runtime.config.revision)
    return runtime, links


def error(code: str, status: int | None = None, **extra: Any) -> Events:
    return [("error", {"code": code, "message": f"{code} {status}", "status": status, **extra})]


DRAINING = error("node_draining")


def idle(runtime: EdgeRuntime) -> bool:
    return all(p.in_flight == 0 for p in runtime.pool.stats().providers.values())


async def stream_from(runtime: EdgeRuntime, attempts: list[str] | None = None) -> Any:
    on_attempt = None if attempts is None else (lambda lease: attempts.append(lease.provider_id))
    async with open_run(runtime, "m", REQUEST, 10, timeout_s=5, on_attempt=on_attempt) as run:
        deltas = [chunk async for chunk in run.deltas()]
    return run, deltas


@pytest.mark.parametrize(
    "first",
    [
        DRAINING,
        error("node_not_ready"),
        error("upstream_unavailable"),
        error("upstream_timeout"),
        error("internal_error"),
        error("upstream_error"),
        error("upstream_error", 500),
        error("upstream_error", 503, retry_after=2.0),
        error("upstream_error", 429, retry_after=1.0),
        error("upstream_error", 401),
        error("upstream_error", 403),
        [(GONE, {})],
    ],
    ids=lambda events: f"{events[0][0]}-{events[0][1].get('code')}-{events[0][1].get('status')}",
)
async def test_a_run_failing_before_its_first_event_goes_to_another_provider(first) -> None:
    runtime, (failing, healthy) = make_nodes(first, ANSWER)
    attempts: list[str] = []

    run, deltas = await stream_from(runtime, attempts)

    assert deltas == [DELTA] and run.status == "ok"
    assert run.lease.provider_id == "p2"
    assert (run.attempts, run.tried) == (2, ("p1", "p2"))
    assert attempts == ["p1", "p2"]
    assert (len(failing.requests), len(healthy.requests)) == (1, 1)
    assert idle(runtime)


@pytest.mark.parametrize(
    ("first", "code"),
    [
        (error("bad_request"), "bad_request"),
        (error("upstream_error", 400, upstream_code="context_length_exceeded"), "upstream_error"),
        (error("upstream_error", 404), "upstream_error"),
        (error("upstream_error", 422), "upstream_error"),
        (error("output_too_large"), "output_too_large"),
        (error("request_too_large"), "request_too_large"),
    ],
)
async def test_a_failure_that_blames_the_request_is_not_tried_elsewhere(first, code) -> None:
    runtime, (failing, other) = make_nodes(first, ANSWER)

    with pytest.raises(RunFailed) as failure:
        await stream_from(runtime)

    assert failure.value.code == code
    assert failure.value.upstream_code == first[0][1].get("upstream_code")
    assert (failure.value.attempts, failure.value.tried) == (1, ("p1",))
    assert (len(failing.requests), len(other.requests)) == (1, 0)
    assert idle(runtime)


async def test_it_never_goes_back_to_a_provider_that_failed_and_stops_at_max_attempts() -> None:
    runtime, links = make_nodes(error("upstream_unavailable"), DRAINING, ANSWER)

    run, _ = await stream_from(runtime)
    assert run.tried == ("p1", "p2", "p3")

    capped = several(3, "failover: {max_attempts: 2}")
    runtime.swap_config(runtime.prepare(load_config_text(capped)))  # live: the next run uses it
    runtime.pool.set_provider_health("p2", True)  # the drain mark of the first run
    for link in links:
        link.frames.clear()
        link.events = error("upstream_error", 502)
    with pytest.raises(RunFailed) as failure:
        await stream_from(runtime)

    assert (failure.value.attempts, failure.value.tried) == (2, ("p1", "p2"))
    assert [len(link.requests) for link in links] == [1, 1, 0]
    assert idle(runtime)


async def test_when_every_provider_failed_the_last_failure_is_the_answer() -> None:
    runtime, links = make_nodes(DRAINING, error("upstream_error", 429, retry_after=3.0))

    with pytest.raises(RunFailed) as failure:
        await stream_from(runtime)

    got = failure.value
    assert (got.code, got.status, got.retry_after) == ("upstream_error", 429, 3.0)
    assert (got.attempts, got.tried) == (2, ("p1", "p2"))
    assert [len(link.requests) for link in links] == [1, 1]
    assert idle(runtime)


async def test_max_attempts_one_never_fails_over() -> None:
    runtime, (failing, other) = make_nodes(DRAINING, ANSWER, extra="failover: {max_attempts: 1}")

    with pytest.raises(RunFailed) as failure:
        await stream_from(runtime)

    assert failure.value.code == "node_draining"
    assert (len(failing.requests), len(other.requests)) == (1, 0)


async def test_every_attempt_shares_the_runs_deadline() -> None:
    runtime, (failing, healthy) = make_nodes(DRAINING, ANSWER)

    await stream_from(runtime)

    first, second = failing.requests[0], healthy.requests[0]
    assert abs(first["deadline"] - second["deadline"]) < 0.05


async def test_a_failover_waits_for_a_busy_provider_other_than_the_one_that_failed() -> None:
    runtime, (failing, _) = make_nodes(error("upstream_error", 503), ANSWER)
    lease = await runtime.pool.acquire("m", 10, frozenset({"p1"}))  # p2 is busy
    assert lease.provider_id == "p2"

    task = asyncio.create_task(stream_from(runtime))
    await wait_until(lambda: runtime.pool.stats().models["m"].queue_depth == 1)
    assert len(failing.requests) == 1 and not task.done()
    lease.release()
    run, deltas = await asyncio.wait_for(task, 1)

    assert (run.tried, deltas) == (("p1", "p2"), [DELTA])
    assert idle(runtime)


async def test_a_failure_after_the_first_event_ends_the_stream_there() -> None:
    runtime, (failing, other) = make_nodes(
        [("delta", DELTA), *error("upstream_error", 500)], ANSWER
    )

    seen = []
    with pytest.raises(RunFailed) as failure:
        async with open_run(runtime, "m", REQUEST, 10, timeout_s=5) as run:
            async for chunk in run.deltas():
                seen.append(chunk)

    assert seen == [DELTA] and failure.value.status == 500
    assert (failure.value.attempts, failure.value.tried) == (1, ("p1",))
    assert (len(failing.requests), len(other.requests)) == (1, 0)
    assert idle(runtime)


# -- whole runs --------------------------------------------------------------------------------


async def test_a_whole_run_that_fails_midway_goes_elsewhere_and_keeps_only_the_answer() -> None:
    completion = {"object": "chat.completion", "choices": [{"index": 0, "message": {}}]}
    runtime, _ = make_nodes(
        [("delta", {"choices": [{"index": 0, "delta": {"content": "lost"}}]}), (GONE, {})],
        [("response", completion), ("done", DONE)],
    )
    attempts: list[str] = []

    done = await complete_run(
        runtime, "m", REQUEST, 10, 5, on_attempt=lambda lease: attempts.append(lease.provider_id)
    )

    assert (done.attempts, done.tried, attempts) == (2, ("p1", "p2"), ["p1", "p2"])
    assert (done.chunks, done.response, done.status) == ((), completion, "ok")
    assert (done.usage, done.finish_reason, done.finish_sent) == (DONE["usage"], "stop", False)
    assert done.lease.provider_id == "p2"
    assert idle(runtime)


async def test_a_whole_run_keeps_the_deltas_of_the_attempt_that_served() -> None:
    runtime, _ = make_nodes(DRAINING, [("delta", DELTA), ("delta", DELTA), ("done", DONE)])

    done = await complete_run(runtime, "m", REQUEST, 10, 5)

    assert (done.chunks, done.response) == ((DELTA, DELTA), None)


async def test_a_whole_run_over_the_output_limit_is_not_tried_again() -> None:
    runtime, (failing, other) = make_nodes([("delta", DELTA), *error("output_too_large")], ANSWER)

    with pytest.raises(RunFailed) as failure:
        await complete_run(runtime, "m", REQUEST, 10, 5)

    assert failure.value.code == "output_too_large"
    assert (len(failing.requests), len(other.requests)) == (1, 0)
    assert idle(runtime)


async def test_a_whole_run_with_no_provider_at_all_raises_the_dispatch_error() -> None:
    runtime, _ = make_nodes(ANSWER)
    runtime.pool.set_node_ready("node-a", False)

    with pytest.raises(NoProviderAvailable):
        await complete_run(runtime, "m", REQUEST, 10, 5)


# -- what attempts tell passive health -----------------------------------------------------------


async def test_rejected_credentials_take_the_provider_out_with_that_reason() -> None:
    runtime, (refused, _) = make_nodes(
        error("upstream_error", 401, upstream_code="invalid_api_key"), ANSWER
    )

    run, _ = await stream_from(runtime)
    assert run.tried == ("p1", "p2")
    stats = runtime.pool.stats().providers["p1"]
    assert (stats.healthy, stats.passive_state, stats.passive_reason) == (
        False,
        "open",
        UPSTREAM_AUTH_FAILED,
    )

    run, _ = await stream_from(runtime)
    assert run.tried == ("p2",)  # straight to the other provider
    assert len(refused.requests) == 1


async def test_credentials_refused_everywhere_fail_as_the_gateways_problem() -> None:
    runtime, _ = make_nodes(
        [("error", {"code": "upstream_error", "message": "bad key sk-123", "status": 401})]
    )

    with pytest.raises(RunFailed) as failure:
        await stream_from(runtime)

    assert (failure.value.code, failure.value.status) == (UPSTREAM_AUTH_FAILED, 401)
    assert "sk-123" not in failure.value.message  # the upstream's words may quote the key


async def test_failing_runs_take_a_provider_out_and_caller_errors_do_not() -> None:
    runtime, (p1,) = make_nodes(
        error("upstream_error", 400), extra="passive_health: {failures: 2, window_s: 60}"
    )

    for _ in range(3):
        with pytest.raises(RunFailed):
            await stream_from(runtime)
    assert runtime.pool.stats().providers["p1"].passive_state == "closed"

    p1.events = error("upstream_unavailable")
    for _ in range(2):
        with pytest.raises(RunFailed):
            await stream_from(runtime)
    stats = runtime.pool.stats().providers["p1"]
    assert (stats.passive_state, stats.passive_reason) == ("open", "upstream_unavailable")
    with pytest.raises(NoProviderAvailable) as out:
        await stream_from(runtime)
    assert out.value.reasons == (("p1", "upstream_unavailable"),)


async def test_node_failures_and_rate_limits_say_nothing_about_passive_health() -> None:
    runtime, (p1,) = make_nodes(error("upstream_error", 429), extra="passive_health: {failures: 1}")

    with pytest.raises(RunFailed):
        await stream_from(runtime)
    p1.events = [(GONE, {})]
    with pytest.raises(RunFailed):
        await stream_from(runtime)

    assert runtime.pool.stats().providers["p1"].passive_state == "closed"


@pytest.mark.parametrize(
    ("code", "status", "elsewhere"),
    [
        ("node_disconnected", None, True),
        ("upstream_error", 408, True),
        ("upstream_error", 409, False),
        ("upstream_error", 413, False),
        (DEADLINE_EXCEEDED, None, False),
        ("edge_shutting_down", None, False),
        ("bad_frame", None, False),
    ],
)
def test_which_failures_may_go_elsewhere(code: str, status: int | None, elsewhere: bool) -> None:
    assert may_go_elsewhere(RunFailed(code, "x", status)) is elsewhere


async def test_a_drains_unhealthy_mark_ends_with_that_nodes_session() -> None:
    runtime, (draining, _) = make_nodes(DRAINING, ANSWER)
    await stream_from(runtime)
    assert not runtime.pool.stats().providers["p1"].healthy

    runtime.nodes.detach(draining.session)  # the Node stops ...
    back = FakeLink(ANSWER)  # ... and comes back in a new session
    back.store = runtime.nodes
    back.session, _ = runtime.nodes.attach("node-a", back)
    runtime.nodes.mark_ready(back.session, runtime.config.revision)

    assert runtime.pool.stats().providers["p1"].healthy
    run, _ = await stream_from(runtime)
    assert run.tried == ("p1",) and len(back.requests) == 1
