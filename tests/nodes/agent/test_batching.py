"""A Node writes its frames in batches once its Edge lists "batch" in its features, and one by
one otherwise; batched or not, every run's events arrive whole and in order."""

from __future__ import annotations

import asyncio
from typing import Any

from nodes import wire

RUNS = 8


async def serve_runs(connection: Any, fakes: Any) -> None:
    for index in range(RUNS):
        await connection.send(fakes.run_request(f"r{index}", f"hello {index}"))
    for index in range(RUNS):
        await connection.expect("run.event", run_id=f"r{index}", event="done")


def assert_whole_and_in_order(connection: Any) -> None:
    for index in range(RUNS):
        events = connection.run_events(f"r{index}")
        assert [e["event"] for e in events] == ["delta", "delta", "delta", "done"]
        text = "".join(e["data"]["choices"][0]["delta"]["content"] for e in events[:-1])
        assert text == f"echo: hello {index}"


async def test_it_batches_what_one_loop_turn_sends_once_the_edge_takes_batches(
    edge: Any, start_agent: Any, fakes: Any
) -> None:
    async with start_agent():
        connection = await edge.next_connection()
        await connection.handshake(fakes.make_node(), features=[wire.FEATURE_BATCH])
        await serve_runs(connection, fakes)
    assert connection.batches > 0
    assert_whole_and_in_order(connection)


async def test_it_sends_frames_one_by_one_to_an_edge_without_the_feature(
    edge: Any, start_agent: Any, fakes: Any
) -> None:
    async with start_agent():
        connection = await edge.next_connection()
        await connection.handshake(fakes.make_node(), features=["something-else"])
        await serve_runs(connection, fakes)
    assert connection.batches == 0
    assert_whole_and_in_order(connection)


async def test_a_draining_node_writes_its_last_batch_before_it_closes(
    edge: Any, start_agent: Any, fakes: Any
) -> None:
    async with start_agent(drain_timeout_s=5.0) as agent:
        connection = await edge.next_connection()
        slow = fakes.make_node(token_delay_ms=50.0)  # still running when the drain starts
        await connection.handshake(slow, features=[wire.FEATURE_BATCH])
        for index in range(RUNS):
            await connection.send(fakes.run_request(f"r{index}", f"hello {index}"))
        for index in range(RUNS):
            await connection.expect("run.event", run_id=f"r{index}", event="delta")
        agent.request_stop()
        async with asyncio.timeout(10):
            await connection.closed.wait()
    assert_whole_and_in_order(connection)
