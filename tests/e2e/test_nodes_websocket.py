"""The Node websocket refuses what it must, seen from a raw client over a real socket.

One Edge for the module. `node-a` is a real Node agent serving a slow echo; the other nodes are
played by the test with a raw websocket client (`RawNode`), to send what a real Node never would:
bad credentials, oversized and malformed frames, events for runs it does not own, a second session.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest

from nodes import wire
from nodes.consumers import MAX_BAD_FRAMES
from tests.e2e.harness import (
    EdgeProcess,
    NodeProcess,
    Tokens,
    echo_config,
    sha256_hex,
    wait_until,
)
from tests.e2e.nodes_support import (
    DONE,
    RawNode,
    astatus,
    await_until,
    chat_body,
    client_headers,
    node_is_ready,
    providers_idle,
    sse_payload,
    streamed_content,
    two_ports,
    wait_node_ready,
)

REAL = "node-a"  # a real Node agent
RAW = "node-raw"  # played by the test: malformed frames, and a run it serves itself
ROGUE = "node-rogue"  # played by the test: reports on runs that are not its own
SUPER = "node-super"  # played by the test: two sessions, the second supersedes the first


def raw_node(node_id: str, tokens: Tokens, model: str) -> dict[str, Any]:
    return {
        "id": node_id,
        "token_hash_sha256": sha256_hex(tokens.node(node_id)),
        "adapters": [{"id": "echo", "type": "echo"}],
        "providers": [
            {"id": f"{node_id}-p", "adapter": "echo", "served_models": [model], "capacity": 2}
        ],
    }


@pytest.fixture(scope="module")
def edge(
    tokens: Tokens,
    edge_factory: Callable[..., EdgeProcess],
    node_factory: Callable[..., NodeProcess],
) -> EdgeProcess:
    public, admin = two_ports()
    config = echo_config(
        tokens,
        public,
        admin,
        node_id=REAL,
        adapters=[{"id": "echo", "type": "echo", "token_delay_ms": 100}],
        providers=[{"id": "real-p", "adapter": "echo", "served_models": ["slow"], "capacity": 2}],
        models=[
            {"id": "real", "providers": {"real-p": "slow"}},
            {"id": "raw", "providers": {f"{RAW}-p": "raw"}},
            {"id": "rogue", "providers": {f"{ROGUE}-p": "rogue"}},
            {"id": "super", "providers": {f"{SUPER}-p": "super"}},
        ],
        extra_nodes=[
            raw_node(RAW, tokens, "raw"),
            raw_node(ROGUE, tokens, "rogue"),
            raw_node(SUPER, tokens, "super"),
        ],
    )
    edge = edge_factory(config, name="nodes-websocket")
    node_factory(edge, REAL)
    wait_node_ready(edge, REAL)
    return edge


RawNodes = Callable[..., Awaitable[RawNode]]


@pytest.fixture
async def raw_nodes(edge: EdgeProcess, tokens: Tokens) -> AsyncIterator[RawNodes]:
    """``await raw_nodes(node_id, headers=None)``: a raw session, closed when the test ends.

    Without ``headers`` it authenticates properly as ``node_id``.
    """
    opened: list[RawNode] = []

    async def open_session(node_id: str, headers: dict[str, str] | None = None) -> RawNode:
        if headers is None:
            node = await RawNode.as_node(edge, tokens, node_id)
        else:
            node = await RawNode.connect(edge, node_id, headers)
        opened.append(node)
        return node

    yield open_session
    for node in opened:
        await node.aclose()


async def ready_raw_node(edge: EdgeProcess, raw_nodes: RawNodes) -> RawNode:
    """The raw node, signed in, configured and ready for runs."""
    node = await raw_nodes(RAW)
    await node.handshake()
    await await_until(lambda: ready(edge, RAW), what=f"{RAW} to be ready")
    return node


def auth(token: str, node_id: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "X-IOP-Node": node_id}


def delta(run_id: str, content: str) -> dict[str, Any]:
    chunk = {
        "id": "chatcmpl-raw",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "raw",
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}],
    }
    return dict(wire.run_delta(run_id, chunk))


def done(run_id: str) -> dict[str, Any]:
    usage = {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5}
    return dict(wire.run_done(run_id, usage, "stop"))  # type: ignore[arg-type]


async def stream_chat(
    edge: EdgeProcess, tokens: Tokens, model: str, text: str, events: list[Any]
) -> httpx.Headers:
    """A streamed request read to its end into ``events``; returns the response headers.

    Run it as a task: daphne sends the headers with the first body bytes, so a Node played by the
    test must act before the caller sees anything.
    """
    async with (
        httpx.AsyncClient(timeout=15) as client,
        client.stream(
            "POST",
            edge.completions_url,
            json=chat_body(model, text, stream=True),
            headers=client_headers(tokens),
        ) as response,
    ):
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if (event := sse_payload(line)) is not None:
                events.append(event)
        return response.headers


async def ready(edge: EdgeProcess, node_id: str) -> bool:
    return node_is_ready(await astatus(edge), node_id)


async def until_events(events: list[Any], count: int) -> None:
    async def enough() -> bool:
        return len(events) >= count

    await await_until(enough, what=f"{count} event(s) on the caller's stream")


# -- authentication -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    [
        "bad token",
        "another node's token",
        "unknown node",
        "no authorization",
        "not a bearer token",
        "no node id",
    ],
)
async def test_a_connection_with_bad_credentials_is_accepted_then_closed_4401(
    edge: EdgeProcess, tokens: Tokens, raw_nodes: RawNodes, case: str
) -> None:
    wrong = "node-not-the-right-token-0123456789"
    headers = {
        "bad token": auth(wrong, RAW),
        "another node's token": auth(tokens.node(ROGUE), RAW),
        "unknown node": auth(tokens.node(RAW), "node-nobody"),
        "no authorization": {"X-IOP-Node": RAW},
        "not a bearer token": {"Authorization": f"Basic {tokens.node(RAW)}", "X-IOP-Node": RAW},
        "no node id": {"Authorization": f"Bearer {tokens.node(RAW)}"},
    }[case]
    refusals = edge.log().count("node websocket refused")

    # The handshake succeeds (no HTTP 403), so the client sees the close code.
    node = await raw_nodes(RAW, headers)

    assert await node.close_code() == wire.CLOSE_UNAUTHORIZED
    assert [f["type"] for f in node.seen] == []  # not even a config
    log = edge.log()
    assert log.count("node websocket refused") == refusals + 1
    state = await astatus(edge)
    assert RAW not in state["nodes"]
    assert "node-nobody" not in state["nodes"]
    for raw_token in (wrong, tokens.node(RAW), tokens.node(ROGUE)):
        assert raw_token not in log


def test_a_real_node_with_a_wrong_token_sees_4401_and_keeps_retrying(
    edge: EdgeProcess, node_factory: Callable[..., NodeProcess]
) -> None:
    node = node_factory(edge, RAW, token="node-wrong-token-for-the-real-agent")
    try:
        wait_until(
            lambda: node.log().count("refused by edge: close 4401 (unauthorized)") >= 2,
            timeout=15,
            what="the agent to be refused with 4401, twice",
        )
    finally:
        node.stop()
    assert "HTTP 403" not in node.log()
    assert node.process.returncode == 0


# -- bad frames ---------------------------------------------------------------------------------


async def test_an_oversized_frame_gets_an_error_frame_then_close_4400(
    edge: EdgeProcess, tokens: Tokens, raw_nodes: RawNodes
) -> None:
    node = await raw_nodes(RAW)
    await node.hello()
    padding = "x" * wire.MAX_FRAME_BYTES
    await node.send_text(json.dumps({"type": "ping", "ts": 1, "padding": padding}))

    error = await node.expect("error")
    assert error["code"] == "too_large"
    assert str(wire.MAX_FRAME_BYTES) in error["message"]
    assert await node.close_code() == wire.CLOSE_PROTOCOL_ERROR


async def test_a_hello_in_another_protocol_version_is_refused_and_closed_4400(
    edge: EdgeProcess, tokens: Tokens, raw_nodes: RawNodes
) -> None:
    node = await raw_nodes(RAW)
    await node.send({**wire.hello(RAW, "future-agent"), "protocol": 2})

    error = await node.expect("error")
    assert error["code"] == "unsupported_protocol"
    assert await node.close_code() == wire.CLOSE_PROTOCOL_ERROR


@pytest.mark.parametrize(
    ("text", "code", "named"),
    [
        ("this is not json", "not_json", "JSON"),
        ('["a", "list"]', "not_object", "object"),
        ('{"type": "run.explode"}', "unknown_type", "run.explode"),
        ('{"type": "run.cancel", "run_id": "r1"}', "unexpected_type", "run.cancel"),
        ('{"type": "provider.health"}', "missing_field", "providers"),
        (
            '{"type": "run.event", "run_id": "r1", "event": "delta", "data": 3}',
            "bad_field",
            "data",
        ),
    ],
)
async def test_a_malformed_frame_gets_an_error_frame_naming_the_problem_and_the_session_goes_on(
    edge: EdgeProcess, tokens: Tokens, raw_nodes: RawNodes, text: str, code: str, named: str
) -> None:
    node = await raw_nodes(RAW)
    await node.hello()

    await node.send_text(text)

    error = await node.expect("error")
    assert error["code"] == code
    assert named in error["message"]
    assert await node.still_open()


async def test_five_malformed_frames_close_the_session_4400(
    edge: EdgeProcess, tokens: Tokens, raw_nodes: RawNodes
) -> None:
    node = await raw_nodes(RAW)
    await node.handshake()
    await await_until(lambda: ready(edge, RAW), what=f"{RAW} to be ready before it misbehaves")

    for attempt in range(4):
        await node.send_text(f"garbage {attempt}")
        assert (await node.expect("error"))["code"] == "not_json"
    assert await node.still_open()

    await node.send_text("garbage 5")
    assert (await node.expect("error"))["code"] == "not_json"
    assert await node.close_code() == wire.CLOSE_PROTOCOL_ERROR

    async def gone() -> bool:
        state = await astatus(edge)
        return not node_is_ready(state, RAW) and not state["providers"][f"{RAW}-p"]["node_ready"]

    await await_until(gone, what=f"{RAW} to leave the pool")


# -- runs a session does not own ----------------------------------------------------------------


async def test_a_run_event_for_a_made_up_run_is_refused_while_a_real_run_completes_untouched(
    edge: EdgeProcess, tokens: Tokens, raw_nodes: RawNodes
) -> None:
    rogue = await raw_nodes(ROGUE)
    await rogue.handshake()
    words = "one two three four five six"  # 7 chunks, 100 ms apart
    events: list[Any] = []
    caller = asyncio.create_task(stream_chat(edge, tokens, "real", words, events))
    await until_events(events, 1)  # the real run is under way

    await rogue.send(delta("run-made-up-1", "INJECTED"))
    await rogue.send(dict(wire.run_error("run-made-up-1", "internal_error", "INJECTED")))
    for _ in range(2):
        refusal = await rogue.expect("error")
        assert refusal["code"] == "unknown_run"
        assert "run-made-up-1" in refusal["message"]
    headers = await asyncio.wait_for(caller, 15)

    assert headers["x-iop-node"] == REAL
    assert events[-1] == DONE
    assert streamed_content(events[:-1]) == f"echo: {words}"
    assert "INJECTED" not in json.dumps(events)
    assert "refused run.event for run run-made-up-1" in edge.log()
    assert await rogue.still_open()  # a refused frame is not yet abuse


async def test_a_run_event_for_another_sessions_run_is_refused_and_never_reaches_its_caller(
    edge: EdgeProcess, tokens: Tokens, raw_nodes: RawNodes
) -> None:
    owner = await raw_nodes(RAW)
    await owner.handshake()
    rogue = await raw_nodes(ROGUE)
    await rogue.handshake()
    await await_until(lambda: ready(edge, RAW), what=f"{RAW} to be ready")
    events: list[Any] = []
    caller = asyncio.create_task(stream_chat(edge, tokens, "raw", "whose run is it", events))
    run_id = (await owner.expect("run.request"))["run_id"]

    # The rogue knows the run id and tries to answer for it, then to end it.
    await rogue.send(delta(run_id, "HIJACKED"))
    await rogue.send(done(run_id))
    for _ in range(2):
        refusal = await rogue.expect("error")
        assert refusal["code"] == "unknown_run"
        assert run_id in refusal["message"]

    # The owner serves its run to the end; only its events reach the caller.
    await owner.send(delta(run_id, "genuine answer"))
    await owner.send(done(run_id))
    headers = await asyncio.wait_for(caller, 15)

    assert headers["x-iop-node"] == RAW
    assert events[-1] == DONE
    assert streamed_content(events[:-1]) == "genuine answer"
    assert "HIJACKED" not in json.dumps(events)
    assert f"refused run.event for run {run_id}" in edge.log()

    async def idle() -> bool:
        return providers_idle(await astatus(edge), [f"{RAW}-p"])

    await await_until(idle, what=f"{RAW}-p idle")


# -- a second session for the same node ---------------------------------------------------------


async def test_a_second_session_supersedes_the_first_with_4409_and_fails_its_runs(
    edge: EdgeProcess, tokens: Tokens, raw_nodes: RawNodes
) -> None:
    first = await raw_nodes(SUPER)
    await first.handshake()
    await await_until(lambda: ready(edge, SUPER), what=f"{SUPER} to be ready")
    events: list[Any] = []
    caller = asyncio.create_task(stream_chat(edge, tokens, "super", "a run", events))
    request = await first.expect("run.request")
    await first.send(delta(request["run_id"], "partial"))
    await until_events(events, 1)

    second = await raw_nodes(SUPER)
    assert await first.close_code() == wire.CLOSE_SUPERSEDED
    headers = await asyncio.wait_for(caller, 15)

    assert headers["x-iop-node"] == SUPER
    assert streamed_content(events[:1]) == "partial"
    assert events[-1]["error"]["code"] == "node_disconnected"
    assert DONE not in events

    # The newer session is the node now: it gets its config and, once acked, serves.
    await second.handshake()

    async def served_by_second() -> bool:
        state = await astatus(edge)
        return node_is_ready(state, SUPER) and providers_idle(state, [f"{SUPER}-p"])

    await await_until(served_by_second, what=f"{SUPER} ready again on its second session")
    assert await second.still_open()


# -- one run's bad frame costs that run only ----------------------------------------------------


async def start_raw_run(
    edge: EdgeProcess, tokens: Tokens, node: RawNode, events: list[Any], text: str = "hi"
) -> tuple[asyncio.Task[httpx.Headers], str]:
    """A streamed call on the raw node, under way (one delta relayed); its task and run id."""
    caller = asyncio.create_task(stream_chat(edge, tokens, "raw", text, events))
    run_id = (await node.expect("run.request"))["run_id"]
    await node.send(delta(run_id, "partial"))
    await until_events(events, 1)
    return caller, run_id


async def test_a_malformed_run_event_fails_that_run_and_the_session_goes_on(
    edge: EdgeProcess, tokens: Tokens, raw_nodes: RawNodes
) -> None:
    node = await ready_raw_node(edge, raw_nodes)
    events: list[Any] = []
    caller, run_id = await start_raw_run(edge, tokens, node, events)

    bad_done = {**done(run_id), "data": {"usage": {"total_tokens": "many"}, "finish_reason": 1}}
    await node.send(bad_done)

    refusal = await node.expect("error")
    assert refusal["code"] == "bad_field"
    assert (await node.expect("run.cancel"))["run_id"] == run_id
    await asyncio.wait_for(caller, 15)
    assert events[-1]["error"]["code"] == "bad_frame"
    assert "data.usage" in events[-1]["error"]["message"]
    # More bad frames for its own runs than the abuse limit allows: still not abuse.
    for _ in range(MAX_BAD_FRAMES + 1):
        await node.send(bad_done)
        assert (await node.expect("error"))["code"] == "bad_field"
    assert await node.still_open()
    assert await ready(edge, RAW)


async def test_an_oversized_run_event_fails_that_run_and_the_session_goes_on(
    edge: EdgeProcess, tokens: Tokens, raw_nodes: RawNodes
) -> None:
    node = await ready_raw_node(edge, raw_nodes)
    events: list[Any] = []
    caller, run_id = await start_raw_run(edge, tokens, node, events)

    await node.send(delta(run_id, "x" * (wire.MAX_FRAME_BYTES + 1)))  # one frame, not in parts

    assert (await node.expect("error"))["code"] == "too_large"
    await asyncio.wait_for(caller, 15)
    assert events[-1]["error"]["code"] == "bad_frame"
    assert await node.still_open()

    async def idle() -> bool:
        return providers_idle(await astatus(edge), [f"{RAW}-p"])

    await await_until(idle, what=f"{RAW}-p idle")


async def receive_in_parts(node: RawNode, accept: frozenset[str]) -> tuple[dict[str, Any], int]:
    """Read ``part`` frames until they make a whole frame; that frame and how many parts."""
    parts = wire.Reassembler()
    count = 0
    while True:
        part = await node.expect("part")
        assert len(wire.encode(part).encode()) <= wire.MAX_FRAME_BYTES  # type: ignore[arg-type]
        count += 1
        whole = parts.take(part, accept)  # type: ignore[arg-type]
        if whole is not None:
            return dict(whole), count


async def test_a_large_request_and_its_large_answer_travel_in_parts(
    edge: EdgeProcess, tokens: Tokens, raw_nodes: RawNodes
) -> None:
    node = await ready_raw_node(edge, raw_nodes)
    text = "é" * (3 * 1024 * 1024 // 2)  # 3 MiB of UTF-8, over the frame limit three times
    events: list[Any] = []
    caller = asyncio.create_task(stream_chat(edge, tokens, "raw", text, events))

    request, count = await receive_in_parts(node, wire.SPLIT_EDGE_TO_NODE)

    assert request["type"] == "run.request" and count >= 3
    assert request["request"]["messages"][0]["content"] == text
    answer = "ü" * (2 * 1024 * 1024)
    for piece in wire.split(wire.run_delta(request["run_id"], delta("", answer)["data"])):
        await node.send_text(piece)
    await node.send(done(request["run_id"]))
    await asyncio.wait_for(caller, 15)
    assert events[-1] == DONE
    assert streamed_content(events[:-1]) == answer


async def test_parts_for_a_run_it_does_not_own_are_refused(
    edge: EdgeProcess, tokens: Tokens, raw_nodes: RawNodes
) -> None:
    rogue = await raw_nodes(ROGUE)
    await rogue.handshake()

    await rogue.send({"type": "part", "run_id": "run-made-up-2", "data": "{", "more": True})

    refusal = await rogue.expect("error")
    assert refusal["code"] == "unknown_run"
    assert await rogue.still_open()


# -- field bounds -------------------------------------------------------------------------------


async def test_an_ack_with_an_oversized_or_odd_revision_is_refused_and_status_still_answers(
    edge: EdgeProcess, tokens: Tokens, raw_nodes: RawNodes
) -> None:
    node = await raw_nodes(RAW)
    config = await node.handshake()
    await await_until(lambda: ready(edge, RAW), what=f"{RAW} to be ready")

    for revision in ("r" * 900_000, "\ud800", "sha256:<b>x</b>"):
        await node.send(dict(wire.config_ack(revision)))
        error = await node.expect("error")
        assert (error["code"], "revision" in error["message"]) == ("bad_field", True)
        assert len(error["message"]) < 200  # named, never quoted back

    state = await astatus(edge)  # raises unless 200
    assert state["nodes"][RAW]["acked_revision"] == config["revision"]
    assert await node.still_open()
