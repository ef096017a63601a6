"""The Node routes each run to its adapter's endpoint, and refuses an unknown one for that run."""

from __future__ import annotations

import json
import time
from typing import Any

from nodes import wire


def run(run_id: str, endpoint: str, body: dict[str, Any]) -> wire.RunRequest:
    request = {"model": "echo-small", **body}
    return wire.run_request(
        run_id,
        "p-echo",
        "echo",
        "echo-small",
        request,
        time.time() + 30,
        endpoint=endpoint,  # type: ignore[arg-type]
    )


async def test_it_serves_each_endpoint_on_the_runs_adapter(
    edge: Any, start_agent: Any, fakes: Any
) -> None:
    async with start_agent():
        connection = await edge.next_connection()
        await connection.handshake(fakes.make_node())
        await connection.send(run("emb", "embeddings", {"input": ["a", "b"], "dimensions": 3}))
        await connection.send(run("cmp", "completions", {"prompt": "say hi", "stream": True}))
        await connection.send(run("rsp", "responses", {"input": "hi there"}))
        for run_id in ("emb", "cmp", "rsp"):
            await connection.expect("run.event", run_id=run_id, event="done")
    [embeddings, done] = connection.run_events("emb")
    assert embeddings["event"] == "response"
    assert [len(item["embedding"]) for item in embeddings["data"]["data"]] == [3, 3]
    assert done["data"]["usage"]["completion_tokens"] == 0
    deltas = [e["data"] for e in connection.run_events("cmp") if e["event"] == "delta"]
    assert "".join(d["choices"][0]["text"] for d in deltas) == "echo: say hi"
    [response, done] = connection.run_events("rsp")
    assert response["data"]["object"] == "response"
    assert response["data"]["output"][0]["content"][0]["text"] == "echo: hi there"
    assert done["data"]["finish_reason"] == "completed"


async def test_an_unknown_endpoint_fails_only_its_run(
    edge: Any, start_agent: Any, fakes: Any
) -> None:
    async with start_agent():
        connection = await edge.next_connection()
        await connection.handshake(fakes.make_node())
        frame = dict(fakes.run_request("bad"), endpoint="images/generations")
        await connection.websocket.send(json.dumps(frame))
        error = await connection.expect("run.event", run_id="bad")
        await connection.send(fakes.run_request("good"))
        done = await connection.expect("run.event", run_id="good", event="done")
    assert error["event"] == "error"
    assert error["data"]["code"] == "bad_request"
    assert "field 'endpoint' must be one of" in error["data"]["message"]
    assert done["data"]["finish_reason"] == "stop"  # the session went on
