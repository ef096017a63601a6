"""The Node's session against a real websocket server playing the Edge."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from nodes import wire
from nodes.agent import session as session_module
from nodes.agent.adapters import Delta, Done
from nodes.agent.session import AGENT_VERSION, EdgeSession


async def test_it_presents_its_credentials_and_says_hello(edge: Any, start_agent: Any) -> None:
    async with start_agent():
        connection = await edge.next_connection()
        hello = await connection.expect("hello")
    assert connection.headers["Authorization"] == "Bearer node-secret-token"
    assert connection.headers["X-IOP-Node"] == "node-a"
    assert hello == wire.hello("node-a", AGENT_VERSION)


async def test_it_pings_the_edge_on_its_own_so_a_busy_link_does_not_make_it_look_silent(
    edge: Any, start_agent: Any, fakes: Any, monkeypatch: Any
) -> None:
    monkeypatch.setattr(session_module, "HEARTBEAT_INTERVAL_S", 0.01)
    async with start_agent():
        connection = await edge.next_connection()
        await connection.handshake(fakes.make_node())
        first = await connection.expect("ping")
        second = await connection.expect("ping")
    # One every interval, without the Edge asking: heartbeats, which ask for no answer.
    assert first == second == wire.ping()


async def test_it_answers_a_ping_with_a_ts_and_not_a_heartbeat(
    edge: Any, start_agent: Any, fakes: Any
) -> None:
    async with start_agent():
        connection = await edge.next_connection()
        await connection.handshake(fakes.make_node())
        await connection.send(wire.ping())
        await connection.send(wire.ping(7.0))
        pong = await connection.expect("pong")
    assert pong == wire.pong(7.0)  # the first pong there is answers the second ping


async def test_it_acks_its_config_then_reports_health(
    edge: Any, start_agent: Any, fakes: Any
) -> None:
    async with start_agent():
        connection = await edge.next_connection()
        ack = await connection.handshake(fakes.make_node(), revision="sha256:one")
        health = await connection.expect("provider.health")
    assert ack == wire.config_ack("sha256:one")
    assert health["providers"] == {"p-echo": {"healthy": True, "detail": "echo"}}


async def test_it_rejects_a_config_it_cannot_apply_and_takes_no_runs(
    edge: Any, start_agent: Any, fakes: Any
) -> None:
    async with start_agent():
        connection = await edge.next_connection()
        ack = await connection.handshake(fakes.make_node(node_id="node-z"))
        await connection.send(fakes.run_request("r1"))
        error = await connection.expect("run.event", run_id="r1")
    assert ack["status"] == "rejected"
    assert "node.id" in ack["error"]
    assert error["event"] == "error"
    assert error["data"]["code"] == "node_not_ready"


async def test_it_streams_a_run_as_run_events(edge: Any, start_agent: Any, fakes: Any) -> None:
    async with start_agent():
        connection = await edge.next_connection()
        await connection.handshake(fakes.make_node())
        await connection.send(fakes.run_request("r1", "hello world"))
        done = await connection.expect("run.event", run_id="r1", event="done")
    deltas = [e["data"] for e in connection.run_events("r1") if e["event"] == "delta"]
    assert "".join(d["choices"][0]["delta"]["content"] for d in deltas) == "echo: hello world"
    assert all(d["model"] == "echo-small" for d in deltas)
    assert done["data"]["finish_reason"] == "stop"
    assert done["data"]["usage"]["completion_tokens"] == len(deltas) == 3


async def test_it_sends_a_whole_answer_as_one_response_then_done(
    edge: Any, start_agent: Any, fakes: Any
) -> None:
    async with start_agent():
        connection = await edge.next_connection()
        await connection.handshake(fakes.make_node())
        await connection.send(fakes.run_request("r1", "hello world", stream=False))
        done = await connection.expect("run.event", run_id="r1", event="done")
    [response, _] = connection.run_events("r1")
    assert response["event"] == "response"
    completion = response["data"]
    assert completion["object"] == "chat.completion"
    assert completion["choices"][0]["message"]["content"] == "echo: hello world"
    assert completion["usage"] == done["data"]["usage"]
    assert "finish_sent" not in done["data"]


class ClosingAdapter:
    """Relays an upstream's own closing chunk, as openai_http does."""

    probe_interval_s = None

    def __init__(self, spec: wire.AdapterSpec) -> None:
        self.id = spec.id

    async def stream(
        self, request: dict[str, Any], target: str, endpoint: str
    ) -> AsyncIterator[Any]:
        yield Delta({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
        yield Done({"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}, "length", True)

    async def probe(self) -> tuple[bool, str]:
        return True, "closing"

    async def aclose(self) -> None:
        return None


async def test_its_done_says_when_the_closing_chunk_was_relayed(
    edge: Any, start_agent: Any, fakes: Any
) -> None:
    async with start_agent(adapter_factory=ClosingAdapter):
        connection = await edge.next_connection()
        await connection.handshake(fakes.make_node())
        await connection.send(fakes.run_request("r1"))
        done = await connection.expect("run.event", run_id="r1", event="done")
    assert (done["data"]["finish_reason"], done["data"]["finish_sent"]) == ("length", True)


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"provider_id": "p-nope"}, "provider 'p-nope' is not on this node"),
        ({"adapter_id": "vllm"}, "uses adapter 'echo', not 'vllm'"),
        ({"target": "gpt-4o"}, "does not serve model 'gpt-4o'"),
        ({"max_tokens": -1}, "max_tokens must be a positive integer"),
    ],
)
async def test_it_answers_a_run_it_cannot_serve_with_bad_request(
    edge: Any, start_agent: Any, fakes: Any, overrides: dict[str, Any], reason: str
) -> None:
    async with start_agent():
        connection = await edge.next_connection()
        await connection.handshake(fakes.make_node())
        await connection.send(fakes.run_request("r1", **overrides))
        error = await connection.expect("run.event", run_id="r1")
    assert error["event"] == "error"
    assert error["data"]["code"] == "bad_request"
    assert reason in error["data"]["message"]


async def test_it_answers_a_malformed_run_request_naming_the_field(
    edge: Any, start_agent: Any, fakes: Any
) -> None:
    async with start_agent():
        connection = await edge.next_connection()
        await connection.handshake(fakes.make_node())
        frame = dict(fakes.run_request("r1"))
        del frame["target"]
        await connection.websocket.send(json.dumps(frame))
        error = await connection.expect("run.event", run_id="r1")
    assert error["data"]["code"] == "bad_request"
    assert "target" in error["data"]["message"]


async def test_it_serves_runs_concurrently(
    edge: Any, start_agent: Any, fakes: Any, gated: Any
) -> None:
    async with start_agent(adapter_factory=gated):
        connection = await edge.next_connection()
        await connection.handshake(fakes.gated_node())
        await connection.send(fakes.gated_run("r1"))
        await connection.send(fakes.gated_run("r2"))
        # Both runs stream their first delta while neither has finished.
        await connection.expect("run.event", run_id="r1", event="delta")
        await connection.expect("run.event", run_id="r2", event="delta")
        gated.built[0].release.set()
        await connection.expect("run.event", run_id="r1", event="done")
        await connection.expect("run.event", run_id="r2", event="done")


async def test_it_cancels_a_run_and_lets_the_adapter_clean_up(
    edge: Any, start_agent: Any, fakes: Any, gated: Any
) -> None:
    async with start_agent(adapter_factory=gated):
        connection = await edge.next_connection()
        await connection.handshake(fakes.gated_node())
        await connection.send(fakes.gated_run("r1"))
        await connection.expect("run.event", run_id="r1", event="delta")
        await connection.send(wire.run_cancel("r1"))
        await fakes.wait(gated.built[0].cleaned_up)
        await connection.round_trip(1.0)
    assert [e["event"] for e in connection.run_events("r1")] == ["delta"]


async def test_it_fails_a_run_that_passes_its_deadline(
    edge: Any, start_agent: Any, fakes: Any, gated: Any
) -> None:
    async with start_agent(adapter_factory=gated):
        connection = await edge.next_connection()
        await connection.handshake(fakes.gated_node())
        await connection.send(fakes.gated_run("r1", deadline_in_s=0.2))
        error = await connection.expect("run.event", run_id="r1", event="error")
        await fakes.wait(gated.built[0].cleaned_up)
    assert error["data"]["code"] == "deadline_exceeded"


async def test_a_refresh_swaps_the_registry_and_drains_the_old_one(
    edge: Any, start_agent: Any, fakes: Any, gated: Any
) -> None:
    async with start_agent(adapter_factory=gated):
        connection = await edge.next_connection()
        await connection.handshake(fakes.gated_node(), revision="rev-1")
        await connection.send(fakes.gated_run("old-run"))
        await connection.expect("run.event", run_id="old-run", event="delta")

        # The gated adapter's spec changes, so the refresh builds a new one for it.
        refreshed = fakes.make_node(
            extra_adapters=(wire.AdapterSpec(id="gated", type="echo", token_delay_ms=1.0),),
            providers=(("p-echo", "echo", ("echo-large",)), ("p-gated", "gated", ("gated-model",))),
        )
        await connection.send(wire.config_refresh("refresh-7", "rev-2", refreshed))
        ack = await connection.expect("config.ack", revision="rev-2")
        assert ack == wire.config_ack("rev-2", refresh_id="refresh-7")

        # New runs use the new registry: the old served model is gone, the new one works.
        await connection.send(fakes.run_request("new-run", target="echo-large"))
        await connection.expect("run.event", run_id="new-run", event="done")
        await connection.send(fakes.run_request("stale-target", target="echo-small"))
        stale = await connection.expect("run.event", run_id="stale-target")
        assert stale["data"]["code"] == "bad_request"

        old_adapter, new_adapter = gated.built
        assert not old_adapter.closed.is_set()  # its run is still streaming
        old_adapter.release.set()
        await connection.expect("run.event", run_id="old-run", event="done")
        await fakes.wait(old_adapter.closed)
        assert not new_adapter.closed.is_set()


async def test_a_rejected_refresh_keeps_the_old_registry(
    edge: Any, start_agent: Any, fakes: Any
) -> None:
    async with start_agent():
        connection = await edge.next_connection()
        await connection.handshake(fakes.make_node(), revision="rev-1")
        broken = fakes.make_node()
        broken["providers"][0]["adapter"] = "missing"
        await connection.send(wire.config_refresh("refresh-8", "rev-2", broken))
        ack = await connection.expect("config.ack", revision="rev-2")
        await connection.send(fakes.run_request("r1"))
        await connection.expect("run.event", run_id="r1", event="done")
    assert ack["status"] == "rejected"
    assert ack["refresh_id"] == "refresh-8"
    assert "node.providers[p-echo].adapter" in ack["error"]


async def test_it_rejects_a_config_whose_adapters_cannot_be_built(
    edge: Any, start_agent: Any, fakes: Any
) -> None:
    def broken_factory(spec: Any) -> Any:
        raise ValueError("no GPU found")

    async with start_agent(adapter_factory=broken_factory):
        connection = await edge.next_connection()
        ack = await connection.handshake(fakes.make_node())
    assert ack["status"] == "rejected"
    assert ack["error"] == "cannot build adapters: no GPU found"


async def test_it_answers_ping_with_pong(edge: Any, start_agent: Any) -> None:
    async with start_agent():
        connection = await edge.next_connection()
        await connection.expect("hello")
        await connection.send(wire.ping(42.5))
        pong = await connection.expect("pong")
    assert pong == wire.pong(42.5)


async def test_it_logs_an_error_frame_from_the_edge(
    edge: Any, start_agent: Any, agent_log: Any
) -> None:
    async with start_agent():
        connection = await edge.next_connection()
        await connection.expect("hello")
        await connection.send(wire.error("unknown_run", "no run 'r9' on this session"))
        logged = await agent_log.wait_for("edge refused a frame")
    assert logged == "edge refused a frame: unknown_run: no run 'r9' on this session"


class RecordingSocket:
    """Just enough of a websocket for driving a EdgeSession's frame handler directly."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def send(self, text: str) -> None:
        self.sent.append(json.loads(text))


async def test_a_run_cancelled_before_it_starts_still_lets_its_registry_drain(
    fakes: Any, gated: Any
) -> None:
    session = EdgeSession(RecordingSocket(), "node-a", adapter_factory=gated)
    await session._handle(wire.encode(wire.config("rev-1", fakes.gated_node())))
    old_adapter = gated.built[0]

    # Frames already buffered are handled in one loop turn: the cancel lands before the run's
    # task has taken its first step.
    await session._handle(wire.encode(fakes.gated_run("r1")))
    await session._handle(wire.encode(wire.run_cancel("r1")))
    changed = fakes.make_node(
        extra_adapters=(wire.AdapterSpec(id="gated", type="echo", token_delay_ms=1.0),),
        providers=fakes.GATED_PROVIDERS,
    )
    await session._handle(wire.encode(wire.config_refresh("rf", "rev-2", changed)))

    await fakes.wait(old_adapter.closed)  # nothing holds the old registry any more
    assert session._runs == {}
    await session._shutdown()


async def test_a_refresh_keeps_an_unchanged_adapter_and_its_connections(
    fakes: Any, gated: Any
) -> None:
    session = EdgeSession(RecordingSocket(), "node-a", adapter_factory=gated)
    await session._handle(wire.encode(wire.config("rev-1", fakes.gated_node())))
    refreshed = fakes.make_node(
        extra_adapters=fakes.GATED,
        providers=(("p-echo", "echo", ("echo-large",)), ("p-gated", "gated", ("gated-model",))),
    )

    await session._handle(wire.encode(wire.config_refresh("rf", "rev-2", refreshed)))

    [gated_adapter] = gated.built  # built once, carried into the new registry
    assert session._registries.current.adapters["gated"] is gated_adapter
    assert not gated_adapter.closed.is_set()
    await session._shutdown()
    assert gated_adapter.closed.is_set()  # closed with the last registry holding it
