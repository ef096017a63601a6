"""The Node's session with frames too large for one: requests in parts, answers in parts.

Against the real websocket server of the fixtures playing the Edge; it sends the part frames
exactly as the Edge's send path makes them (``wire.split``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from nodes import wire
from nodes.agent.adapters import Response, build_adapter


async def send_in_parts(connection: Any, frame: wire.Frame) -> list[str]:
    texts = wire.split(frame)
    assert len(texts) > 1
    for text in texts:
        await connection.websocket.send(text)
    return texts


async def answer_of(connection: Any, run_id: str) -> dict[str, Any]:
    """The run's `response` event, put back together from the parts the Node sent."""
    parts = wire.Reassembler()
    while True:
        part = await connection.expect("part", run_id=run_id)
        frame = parts.take(part, wire.SPLIT_NODE_TO_EDGE)
        if frame is not None:
            return dict(frame)


async def test_a_request_in_parts_is_served_and_a_large_answer_goes_back_in_parts(
    edge: Any, start_agent: Any, fakes: Any
) -> None:
    text = "word " * (600 * 1024)  # 3 MiB: over the frame limit three times
    async with start_agent():
        connection = await edge.next_connection()
        await connection.handshake(fakes.make_node())
        await send_in_parts(connection, fakes.run_request("r1", text, stream=False))
        answer = await answer_of(connection, "r1")
        done = await connection.expect("run.event", run_id="r1", event="done")
    assert answer["event"] == "response"
    assert answer["data"]["choices"][0]["message"]["content"] == f"echo: {text.strip()}"
    assert done["data"]["finish_reason"] == "stop"


async def test_parts_that_make_a_bad_request_get_an_error_for_that_run_and_the_session_goes_on(
    edge: Any, start_agent: Any, fakes: Any
) -> None:
    broken = wire.run_request("r1", "p-echo", "echo", "", {"x": "y" * (2 * 1024 * 1024)}, 1.0)
    async with start_agent():
        connection = await edge.next_connection()
        await connection.handshake(fakes.make_node())
        await send_in_parts(connection, broken)  # an empty target
        error = await connection.expect("run.event", run_id="r1")
        await connection.send(fakes.run_request("r2"))
        done = await connection.expect("run.event", run_id="r2", event="done")
    assert error["event"] == "error"
    assert error["data"]["code"] == wire.ERROR_BAD_REQUEST
    assert "target" in error["data"]["message"]
    assert done["data"]["finish_reason"] == "stop"


async def test_a_cancel_drops_a_request_cut_short_in_its_parts(
    edge: Any, start_agent: Any, fakes: Any
) -> None:
    request = fakes.run_request("r1", "word " * (600 * 1024), stream=False)
    first, *_ = wire.split(request)
    async with start_agent():
        connection = await edge.next_connection()
        await connection.handshake(fakes.make_node())
        await connection.websocket.send(first)
        await connection.send(wire.run_cancel("r1"))  # the Edge gave up before the rest
        # The run id's next request starts afresh, and is served.
        await send_in_parts(connection, request)
        answer = await answer_of(connection, "r1")
        await connection.round_trip(1.0)
    assert answer["event"] == "response"
    assert not [e for e in connection.run_events("r1") if e["event"] == "error"]


class HugeAnswer:
    """Answers with one chat.completion larger than the wire can carry, even in parts."""

    probe_interval_s = None

    def __init__(self, spec: wire.AdapterSpec) -> None:
        self.id = spec.id

    async def stream(
        self, request: dict[str, Any], target: str, endpoint: str
    ) -> AsyncIterator[Any]:
        content = "z" * (wire.MAX_MESSAGE_BYTES + 1)
        yield Response(
            {"object": "chat.completion", "choices": [{"message": {"content": content}}]}
        )

    async def probe(self) -> tuple[bool, str]:
        return True, "huge"

    async def aclose(self) -> None:
        return None


def huge_factory(spec: wire.AdapterSpec) -> Any:
    return HugeAnswer(spec) if spec.id == "gated" else build_adapter(spec)


async def test_an_answer_too_large_even_in_parts_fails_that_run_as_output_too_large(
    edge: Any, start_agent: Any, fakes: Any
) -> None:
    async with start_agent(adapter_factory=huge_factory):
        connection = await edge.next_connection()
        await connection.handshake(fakes.gated_node())
        await connection.send(fakes.gated_run("r1"))
        error = await connection.expect("run.event", run_id="r1")
        await connection.send(fakes.run_request("r2"))
        done = await connection.expect("run.event", run_id="r2", event="done")
    assert error["event"] == "error"
    assert error["data"]["code"] == wire.ERROR_OUTPUT_TOO_LARGE
    assert "message limit" in error["data"]["message"]
    assert not [f for f in connection.frames if f["type"] == "part"]  # nothing of it was sent
    assert done["data"]["finish_reason"] == "stop"
