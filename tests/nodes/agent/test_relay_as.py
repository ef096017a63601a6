"""A run.request with ``relay_as``: the Node writes each chunk as the caller gets it, as text."""

from __future__ import annotations

import json
import time
from typing import Any

from nodes import wire

RELAY_AS: wire.RelayAs = {"id": "chatcmpl-caller-1", "model": "the caller's model"}
CHAT = {"messages": [{"role": "user", "content": "hi there"}]}


def run(run_id: str, endpoint: wire.Endpoint, body: dict[str, Any], **options: Any) -> Any:
    request = {"model": "echo-small", "stream": True, **body}
    return wire.run_request(
        run_id,
        "p-echo",
        "echo",
        "echo-small",
        request,
        time.time() + 30,
        endpoint=endpoint,
        **options,
    )


async def served(edge: Any, start_agent: Any, fakes: Any, *requests: Any) -> Any:
    """The connection once the agent has ended each run: done, or (``bad``) an error."""
    async with start_agent():
        connection = await edge.next_connection()
        await connection.handshake(fakes.make_node())
        for request in requests:
            await connection.send(request)
        for request in requests:
            ending = "error" if request["run_id"] == "bad" else "done"
            await connection.expect("run.event", run_id=request["run_id"], event=ending)
    return connection


async def test_each_chunk_travels_as_the_text_its_caller_gets(
    edge: Any, start_agent: Any, fakes: Any
) -> None:
    connection = await served(
        edge,
        start_agent,
        fakes,
        run("chat", "chat.completions", CHAT, relay_as=RELAY_AS),
        run("cmp", "completions", {"prompt": "say hi"}, relay_as=RELAY_AS),
    )
    for run_id, text_of in (
        ("chat", lambda choice: choice["delta"].get("content", "")),
        ("cmp", lambda choice: choice["text"]),
    ):
        *chunks, done = connection.run_events(run_id)
        assert {event["event"] for event in chunks} == {"chunk"}
        texts = [event["data"]["text"] for event in chunks]
        assert all("\n" not in text for text in texts)
        parsed = [json.loads(text) for text in texts]
        assert {(chunk["id"], chunk["model"]) for chunk in parsed} == {
            (RELAY_AS["id"], RELAY_AS["model"])
        }
        assert all("usage" not in chunk for chunk in parsed)
        answer = "".join(text_of(chunk["choices"][0]) for chunk in parsed if chunk["choices"])
        assert answer.startswith("echo: ")
        assert done["data"]["usage"]["completion_tokens"] > 0


async def test_without_relay_as_or_outside_chunk_streams_events_go_as_sent(
    edge: Any, start_agent: Any, fakes: Any
) -> None:
    connection = await served(
        edge,
        start_agent,
        fakes,
        run("plain", "chat.completions", CHAT),
        # The Responses API's events are not chunks: relay_as does not apply to them.
        run("rsp", "responses", {"input": "hi"}, relay_as=RELAY_AS),
    )
    for run_id in ("plain", "rsp"):
        *events, _ = connection.run_events(run_id)
        assert events and {event["event"] for event in events} == {"delta"}
    [first, *_] = connection.run_events("rsp")
    assert first["data"]["type"] == "response.created"


async def test_a_malformed_relay_as_fails_only_its_run(
    edge: Any, start_agent: Any, fakes: Any
) -> None:
    bad_relay_as = {"id": "has space", "model": "m"}
    connection = await served(
        edge,
        start_agent,
        fakes,
        run("bad", "chat.completions", CHAT, relay_as=bad_relay_as),
        run("good", "chat.completions", CHAT, relay_as=RELAY_AS),
    )
    [error] = connection.run_events("bad")
    assert error["data"]["code"] == wire.ERROR_BAD_REQUEST
    assert "relay_as.id" in error["data"]["message"]
