"""A Node's `batch` frame at the Edge: each frame in it is taken as if it had come alone (its
run's events in order, a bad or foreign one refused by itself), and the Edge's `config` says
it takes them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import yaml
from channels.testing import WebsocketCommunicator

from edge.config import load_config_text
from edge.runtime import EdgeRuntime, get_runtime, install_runtime, runtime_installed
from edge.usage import Usage
from nodes import wire
from nodes.ack_log import RevisionAcks
from nodes.sessions import BAD_FRAME, NodeSession
from tests.e2e.harness import Tokens, echo_config
from tests.nodes.consumer_sign_in import sign_in

# Channels closes old database connections when a socket disconnects (STACK-NOTES).
pytestmark = pytest.mark.django_db(transaction=True)

TOKENS = Tokens()
USAGE: wire.Usage = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}


async def write_nothing(batch: list[Usage] | list[RevisionAcks]) -> None:
    return None


@pytest.fixture
def runtime() -> Iterator[EdgeRuntime]:
    previous = get_runtime() if runtime_installed() else None
    text = yaml.safe_dump(echo_config(TOKENS, 18000, 18001))
    runtime = EdgeRuntime(load_config_text(text), None, write_nothing, write_nothing)
    install_runtime(runtime)
    yield runtime
    install_runtime(previous)


@pytest.fixture
async def node(runtime: EdgeRuntime) -> AsyncIterator[tuple[WebsocketCommunicator, dict[str, Any]]]:
    """`node-a` signed in and acked: the communicator and the config the Edge sent it."""
    communicator, config = await sign_in(TOKENS)
    yield communicator, config
    await communicator.disconnect()


def session_of(runtime: EdgeRuntime) -> NodeSession:
    session = runtime.nodes.get("node-a")
    assert session is not None
    return session


def delta(run_id: str, text: str) -> str:
    return wire.encode(wire.run_delta(run_id, {"choices": [{"delta": {"content": text}}]}))


async def events(stream: Any, count: int) -> list[tuple[str, Any]]:
    return [await stream.next_event() for _ in range(count)]


async def test_the_edge_tells_each_node_it_takes_batches(node: Any) -> None:
    _, config = node

    assert config["features"] == [wire.FEATURE_BATCH]


async def test_each_frame_of_a_batch_reaches_its_run_in_order(
    runtime: EdgeRuntime, node: Any
) -> None:
    communicator, _ = node
    session = session_of(runtime)
    one, two = session.open_run("run-1"), session.open_run("run-2")
    texts = [
        delta("run-1", "a"),
        delta("run-2", "x"),
        delta("run-1", "b"),
        wire.encode(wire.run_done("run-1", USAGE, "stop")),
        wire.encode(wire.run_done("run-2", USAGE, "length")),
    ]

    await communicator.send_to(text_data=wire.batch_text(texts))

    first = await events(one, 3)
    second = await events(two, 2)
    assert [(e, d.get("choices", [{}])[0].get("delta")) for e, d in first[:2]] == [
        ("delta", {"content": "a"}),
        ("delta", {"content": "b"}),
    ]
    assert first[2] == ("done", {"usage": USAGE, "finish_reason": "stop"})
    assert [e for e, _ in second] == ["delta", "done"]
    assert one.received == sum(len(t) for t in texts if '"run-1"' in t)  # each frame's own size


async def test_a_bad_or_foreign_frame_in_a_batch_is_refused_alone(
    runtime: EdgeRuntime, node: Any
) -> None:
    communicator, _ = node
    session = session_of(runtime)
    good, broken = session.open_run("run-good"), session.open_run("run-broken")
    no_usage = {"type": "run.event", "run_id": "run-broken", "event": "done", "data": {}}
    bad_done = json.dumps(no_usage)
    texts = [
        delta("run-somebody-elses", "?"),
        bad_done,
        delta("run-good", "ok"),
        wire.encode(wire.run_done("run-good", USAGE, "stop")),
    ]

    await communicator.send_to(text_data=wire.batch_text(texts))

    refusals = [json.loads(await communicator.receive_from()) for _ in range(2)]
    assert [r["code"] for r in refusals] == ["unknown_run", "bad_field"]
    assert [e for e, _ in await events(good, 2)] == ["delta", "done"]
    failed, data = await broken.next_event()
    assert (failed, data["code"]) == ("error", BAD_FRAME)
    assert not session.closed


async def test_a_frame_of_another_type_in_a_batch_is_taken_as_if_it_came_alone(
    runtime: EdgeRuntime, node: Any
) -> None:
    communicator, _ = node
    session = session_of(runtime)
    run = session.open_run("run-1")
    texts = [delta("run-1", "a"), wire.encode(wire.ping(12.5)), delta("run-1", "b")]

    await communicator.send_to(text_data=wire.batch_text(texts))

    assert json.loads(await communicator.receive_from()) == wire.pong(12.5)
    got = await events(run, 2)
    assert [data["choices"][0]["delta"]["content"] for _, data in got] == ["a", "b"]
    assert not session.closed
