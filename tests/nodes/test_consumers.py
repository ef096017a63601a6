"""The Node consumer in process: a bug inside it ends that session cleanly, never a zombie.

A real Node cannot make the consumer raise on purpose, so the bug is planted with monkeypatch;
everything else (Channels' consumer, the runtime, the session store, the pool) is the real thing.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import yaml
from channels.testing import WebsocketCommunicator

from edge.config import load_config_text
from edge.operator_api.status import StatusView, runtime_status
from edge.runtime import EdgeRuntime, get_runtime, install_runtime, runtime_installed
from edge.usage import Usage
from nodes import wire
from nodes.ack_log import RevisionAcks
from nodes.consumers import CLOSE_INTERNAL_ERROR, MAX_BAD_FRAMES, NodeConsumer, keep_alive_step
from nodes.log_limit import LogLimit
from nodes.sessions import NODE_DISCONNECTED, WARNING_LINES
from tests.e2e.harness import Tokens, echo_config
from tests.nodes.consumer_sign_in import sign_in

# Channels closes old database connections when a socket disconnects (STACK-NOTES).
pytestmark = pytest.mark.django_db(transaction=True)

TOKENS = Tokens()
USAGE: wire.Usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}


async def write_no_usage(batch: list[Usage]) -> None:
    return None


async def write_no_acks(batch: list[RevisionAcks]) -> None:
    return None


@pytest.fixture
def runtime(tmp_path: Any) -> Iterator[EdgeRuntime]:
    """The process's runtime for one echo node `node-a` (provider `echo-1`), no database."""
    previous = get_runtime() if runtime_installed() else None
    text = yaml.safe_dump(echo_config(TOKENS, 18000, 18001))
    runtime = EdgeRuntime(load_config_text(text), None, write_no_usage, write_no_acks)
    install_runtime(runtime)
    yield runtime
    install_runtime(previous)


async def until(condition: Callable[[], Any], what: str) -> None:
    try:
        async with asyncio.timeout(5):
            while not condition():
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


@pytest.fixture
async def node(runtime: EdgeRuntime) -> AsyncIterator[WebsocketCommunicator]:
    """`node-a` connected, configured and ready."""
    communicator, _ = await sign_in(TOKENS)
    await until(lambda: runtime.pool.stats().providers["echo-1"].node_ready, "node-a ready")
    yield communicator
    await communicator.disconnect()


def boom(*args: Any, **kwargs: Any) -> None:
    raise RuntimeError("a bug in the consumer")


async def test_an_exception_in_a_handler_closes_the_session_and_its_runs_fail(
    runtime: EdgeRuntime, node: WebsocketCommunicator, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = runtime.nodes.ready("node-a")
    assert session is not None
    stream = session.open_run("r1")  # a run in flight on the Node
    monkeypatch.setattr(NodeConsumer, "_provider_health", boom)

    await node.send_to(text_data=wire.encode(wire.provider_health({"echo-1": (True, "ok")})))

    closed = await node.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": CLOSE_INTERNAL_ERROR}
    event, data = await asyncio.wait_for(stream.next_event(), 5)
    assert (event, data["code"]) == ("error", NODE_DISCONNECTED)
    assert runtime.nodes.get("node-a") is None
    assert not runtime.pool.stats().providers["echo-1"].node_ready


async def test_an_exception_in_the_keep_alive_closes_the_session(
    runtime: EdgeRuntime, node: WebsocketCommunicator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wire, "ping", boom)  # the next keep-alive ping raises

    closed = await node.receive_output(timeout=10)

    assert closed == {"type": "websocket.close", "code": CLOSE_INTERNAL_ERROR}
    assert runtime.nodes.get("node-a") is None
    assert not runtime.pool.stats().providers["echo-1"].node_ready


async def test_a_flood_of_refused_frames_writes_a_bounded_log_and_the_session_acts_as_before(
    runtime: EdgeRuntime, node: WebsocketCommunicator, caplog: pytest.LogCaptureFixture
) -> None:
    session = runtime.nodes.ready("node-a")
    assert session is not None
    # A clock that never moves: the whole flood falls in one window, however slow the box.
    session.warnings = LogLimit("node node-a", lines=WARNING_LINES, clock=lambda: 0.0)
    foreign = wire.provider_health({f"other-{i}": (True, "ok") for i in range(50)})
    rejected = wire.config_ack(runtime.config.revision, error="node.id: wrong")
    flood = 300
    with caplog.at_level(logging.INFO, logger="nodes"):
        for i in range(flood):
            await node.send_to(text_data=wire.encode(wire.run_done(f"made-up-{i}", USAGE, "stop")))
            await node.send_to(text_data=wire.encode(foreign))
            await node.send_to(text_data=wire.encode(rejected))
        refusals = [json.loads(await node.receive_from(timeout=5)) for _ in range(flood)]
        during = len(node_lines(caplog))
        for _ in range(MAX_BAD_FRAMES):
            await node.send_to(text_data="not json")
        errors = [json.loads(await node.receive_from(timeout=5)) for _ in range(MAX_BAD_FRAMES)]
        closed = await node.receive_output(timeout=5)
        await node.disconnect()  # the Node's socket sees the close: the session ends

    # Every refused frame still got its error frame, and five malformed ones still close 4400.
    assert {(f["type"], f["code"]) for f in refusals} == {("error", "unknown_run")}
    assert [f["code"] for f in errors] == ["not_json"] * MAX_BAD_FRAMES
    assert closed == {"type": "websocket.close", "code": wire.CLOSE_PROTOCOL_ERROR}
    # 900 warnings' worth of frames wrote at most the window's lines; the rest are one summary.
    assert during <= WARNING_LINES
    summaries = [r.getMessage() for r in caplog.records if "suppressed" in r.getMessage()]
    assert summaries == [
        f"node node-a: {3 * flood - WARNING_LINES} more warnings suppressed in the last 0 s"
    ]
    assert len(node_lines(caplog)) <= WARNING_LINES + 3  # the close, the disconnect, the summary


def node_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """What the Node sessions wrote (the limiter's business), not other loggers' lines."""
    return [r for r in caplog.records if r.name.startswith("nodes")]


async def test_a_second_hello_on_a_session_is_refused_and_sends_no_config(
    node: WebsocketCommunicator,
) -> None:
    await node.send_to(text_data=wire.encode(wire.hello("node-a", "test")))
    refused = json.loads(await node.receive_from(timeout=5))
    assert (refused["type"], refused["code"]) == ("error", "bad_hello")
    assert await node.receive_nothing(timeout=0.2)


async def test_status_answers_whatever_a_session_stored(
    runtime: EdgeRuntime, node: WebsocketCommunicator
) -> None:
    # The codec refuses such values; the status must hold even if one got past it.
    session = runtime.nodes.ready("node-a")
    assert session is not None
    session.acked_revision = "\ud800" + "r" * 900_000
    runtime.pool.set_provider_health("echo-1", False, "\udfff" + "d" * 900_000)

    state = await runtime_status()
    rendered = StatusView.renderer_classes[0]().render(state)

    assert len(rendered) < 64 * 1024
    node_state = json.loads(rendered)["nodes"]["node-a"]
    assert node_state["acked_revision"].startswith("?rrr")
    assert len(node_state["acked_revision"]) == wire.MAX_REVISION_CHARS


@pytest.mark.parametrize(
    ("quiet_s", "step"),
    [(0.0, "wait"), (1.9, "wait"), (2.0, "ping"), (6.0, "ping"), (6.1, "drop")],
)
def test_the_keep_alive_pings_only_a_node_quiet_for_an_interval(quiet_s, step) -> None:
    """A Node that pings on its own interval is never pinged back: half the keep-alive frames."""
    assert keep_alive_step(quiet_s, interval_s=2.0) == step


async def test_a_ping_with_a_ts_gets_its_pong_and_a_heartbeat_none(
    node: WebsocketCommunicator,
) -> None:
    await node.send_to(text_data=wire.encode(wire.ping()))
    await node.send_to(text_data=wire.encode(wire.ping(3.5)))

    # The first frame back answers the second ping: the heartbeat got nothing.
    assert json.loads(await node.receive_from(timeout=5)) == wire.pong(3.5)
