"""Live inputs: capacity changes, Node readiness, health flips and snapshot swaps (§4.6-4.7)."""

from __future__ import annotations

import pytest

from edge.dispatch import ModelNotFound, NoProviderAvailable, ProviderPool
from tests.edge.dispatch.pool_helpers import (
    LONG_TOKENS,
    NODE_A,
    NODE_B,
    SHORT_TOKENS,
    enqueue,
    granted,
    in_flight,
    long_in_flight,
    make_pool,
    make_provider,
    make_snapshot,
    queue_depth,
    wait_until,
)


async def test_it_starts_with_nodes_not_ready_and_providers_healthy() -> None:
    pool = ProviderPool(make_snapshot([make_provider("p1")], {"chat": ["p1"]}))

    stats = pool.stats().providers["p1"]

    assert (stats.node_ready, stats.healthy, stats.enabled, stats.listed) == (
        False,
        True,
        True,
        True,
    )
    with pytest.raises(NoProviderAvailable):
        await pool.acquire("chat", SHORT_TOKENS)


async def test_it_keeps_running_work_when_capacity_is_cut() -> None:
    pool = make_pool([make_provider("p1", capacity=3)], {"chat": ["p1"]})
    held = [await pool.acquire("chat", SHORT_TOKENS) for _ in range(3)]

    pool.apply_snapshot(make_snapshot([make_provider("p1", capacity=1)], {"chat": ["p1"]}))
    waiter = await enqueue(pool, "chat")

    assert [lease.released for lease in held] == [False, False, False]
    assert in_flight(pool, "p1") == 3
    held[0].release()
    held[1].release()
    assert not waiter.done() and in_flight(pool, "p1") == 1
    held[2].release()
    assert (await granted(waiter)).provider_id == "p1"
    assert in_flight(pool, "p1") == 1


async def test_it_admits_waiters_at_once_when_capacity_is_raised() -> None:
    pool = make_pool([make_provider("p1", capacity=1)], {"chat": ["p1"]})
    await pool.acquire("chat", SHORT_TOKENS)
    waiters = [await enqueue(pool, "chat") for _ in range(3)]

    pool.apply_snapshot(make_snapshot([make_provider("p1", capacity=3)], {"chat": ["p1"]}))

    assert in_flight(pool, "p1") == 3
    assert queue_depth(pool, "chat") == 1
    assert [w.done() for w in waiters] == [False, False, False]  # granted, not yet resumed
    await granted(waiters[0])
    await granted(waiters[1])
    assert not waiters[2].done()
    waiters[2].cancel()


async def test_it_admits_waiters_at_once_when_a_node_becomes_ready() -> None:
    pool = make_pool(
        [make_provider("p1", node=NODE_A), make_provider("p2", node=NODE_B, priority=1)],
        {"chat": ["p1", "p2"]},
        ready=[NODE_A],
    )
    await pool.acquire("chat", SHORT_TOKENS)
    waiter = await enqueue(pool, "chat")

    pool.set_node_ready(NODE_B, True)

    assert in_flight(pool, "p2") == 1
    assert (await granted(waiter)).node_id == NODE_B


async def test_it_keeps_leases_counted_on_a_node_that_went_away() -> None:
    pool = make_pool([make_provider("p1", capacity=2, long_slots=1)], {"chat": ["p1"]})
    short = await pool.acquire("chat", SHORT_TOKENS)
    long = await pool.acquire("chat", LONG_TOKENS)

    pool.set_node_ready(NODE_A, False)

    assert (in_flight(pool, "p1"), long_in_flight(pool, "p1")) == (2, 1)
    with pytest.raises(NoProviderAvailable):
        await pool.acquire("chat", SHORT_TOKENS)
    short.release()
    long.release()
    assert (in_flight(pool, "p1"), long_in_flight(pool, "p1")) == (0, 0)


async def test_it_does_not_admit_past_capacity_when_a_node_comes_back_with_work_held() -> None:
    pool = make_pool([make_provider("p1")], {"chat": ["p1"]})
    held = await pool.acquire("chat", SHORT_TOKENS)
    pool.set_node_ready(NODE_A, False)
    pool.set_node_ready(NODE_A, True)
    waiter = await enqueue(pool, "chat")

    assert in_flight(pool, "p1") == 1
    held.release()
    assert (await granted(waiter)).provider_id == "p1"


async def test_it_fails_waiters_when_no_provider_is_left_after_their_node_goes() -> None:
    pool = make_pool(
        [make_provider("p1", node=NODE_A), make_provider("p2", node=NODE_B)],
        {"chat": ["p1"], "code": ["p1", "p2"]},
    )
    await pool.acquire("chat", SHORT_TOKENS)
    assert (await pool.acquire("code", SHORT_TOKENS)).provider_id == "p2"
    chat_waiter = await enqueue(pool, "chat")
    code_waiter = await enqueue(pool, "code")

    pool.set_node_ready(NODE_A, False)
    await wait_until(chat_waiter.done)

    assert isinstance(chat_waiter.exception(), NoProviderAvailable)
    assert not code_waiter.done()  # p2 on node-b would still serve it
    code_waiter.cancel()


async def test_it_stops_and_resumes_using_a_provider_as_its_health_flips() -> None:
    pool = make_pool(
        [make_provider("p1", priority=1), make_provider("p2", priority=2)],
        {"chat": ["p1", "p2"]},
    )
    pool.set_provider_health("p1", False)
    on_p2 = await pool.acquire("chat", SHORT_TOKENS)
    waiter = await enqueue(pool, "chat")

    pool.set_provider_health("p1", True)

    assert on_p2.provider_id == "p2"
    assert (await granted(waiter)).provider_id == "p1"
    assert pool.stats().providers["p1"].healthy


async def test_it_fails_waiters_when_their_only_provider_turns_unhealthy() -> None:
    pool = make_pool([make_provider("p1")], {"chat": ["p1"]})
    held = await pool.acquire("chat", SHORT_TOKENS)
    waiter = await enqueue(pool, "chat")

    pool.set_provider_health("p1", False)
    await wait_until(waiter.done)

    assert isinstance(waiter.exception(), NoProviderAvailable)
    assert not held.released and in_flight(pool, "p1") == 1


async def test_it_remembers_health_reported_before_the_provider_is_configured() -> None:
    pool = make_pool([make_provider("p1")], {"chat": ["p1"]})
    pool.set_provider_health("p-new", False)

    providers = [make_provider("p1"), make_provider("p-new", priority=1)]
    pool.apply_snapshot(make_snapshot(providers, {"chat": ["p1", "p-new"]}))

    assert (await pool.acquire("chat", SHORT_TOKENS)).provider_id == "p1"


async def test_it_fails_waiters_of_a_model_removed_by_a_snapshot_swap() -> None:
    pool = make_pool([make_provider("p1")], {"chat": ["p1"], "code": ["p1"]})
    held = await pool.acquire("chat", SHORT_TOKENS)
    chat_waiter = await enqueue(pool, "chat")
    code_waiter = await enqueue(pool, "code")

    pool.apply_snapshot(make_snapshot([make_provider("p1")], {"code": ["p1"]}))
    await wait_until(chat_waiter.done)

    assert isinstance(chat_waiter.exception(), ModelNotFound)
    assert "chat" not in pool.stats().models
    with pytest.raises(ModelNotFound):
        await pool.acquire("chat", SHORT_TOKENS)
    held.release()
    assert (await granted(code_waiter)).model == "code"


async def test_it_fails_waiters_no_provider_serves_after_a_snapshot_swap() -> None:
    pool = make_pool([make_provider("p1")], {"chat": ["p1"]})
    await pool.acquire("chat", SHORT_TOKENS)
    waiter = await enqueue(pool, "chat")

    pool.apply_snapshot(make_snapshot([make_provider("p1", enabled=False)], {"chat": ["p1"]}))
    await wait_until(waiter.done)

    assert isinstance(waiter.exception(), NoProviderAvailable)


async def test_it_admits_waiters_onto_a_route_added_by_a_snapshot_swap() -> None:
    pool = make_pool([make_provider("p1"), make_provider("p2")], {"chat": ["p1"]})
    await pool.acquire("chat", SHORT_TOKENS)
    waiter = await enqueue(pool, "chat")

    pool.apply_snapshot(
        make_snapshot([make_provider("p1"), make_provider("p2")], {"chat": ["p1", "p2"]})
    )

    lease = await granted(waiter)
    assert (lease.provider_id, lease.served_model) == ("p2", "chat@p2")


async def test_it_carries_counters_across_snapshot_swaps() -> None:
    pool = make_pool([make_provider("p1", capacity=1)], {"chat": ["p1"]})
    held = await pool.acquire("chat", SHORT_TOKENS)

    pool.apply_snapshot(make_snapshot([make_provider("p1", capacity=1)], {"code": ["p1"]}))

    assert pool.try_acquire("code", SHORT_TOKENS) is None
    held.release()
    assert pool.try_acquire("code", SHORT_TOKENS) is not None


async def test_it_drains_a_provider_removed_while_busy_then_forgets_it() -> None:
    pool = make_pool([make_provider("p1"), make_provider("p2")], {"chat": ["p1", "p2"]})
    held = await pool.acquire("chat", SHORT_TOKENS)

    pool.apply_snapshot(make_snapshot([make_provider("p2")], {"chat": ["p2"]}))

    assert pool.stats().providers["p1"].listed is False
    assert in_flight(pool, "p1") == 1
    held.release()
    assert "p1" not in pool.stats().providers


async def test_it_counts_a_provider_readded_before_it_drained_with_its_old_leases() -> None:
    pool = make_pool([make_provider("p1", capacity=1)], {"chat": ["p1"]})
    held = await pool.acquire("chat", SHORT_TOKENS)
    pool.apply_snapshot(make_snapshot([], {}))

    pool.apply_snapshot(make_snapshot([make_provider("p1", capacity=1)], {"chat": ["p1"]}))

    assert pool.try_acquire("chat", SHORT_TOKENS) is None
    held.release()
    assert in_flight(pool, "p1") == 0


async def test_it_reports_queue_depth_and_oldest_wait_per_model() -> None:
    pool = make_pool([make_provider("p1", capacity=1)], {"chat": ["p1"], "idle": ["p1"]})
    await pool.acquire("chat", SHORT_TOKENS)
    normal = await enqueue(pool, "chat")
    long = await enqueue(pool, "chat", LONG_TOKENS)

    stats = pool.stats()

    assert (stats.models["chat"].queue_depth, stats.models["chat"].long_queue_depth) == (2, 1)
    assert stats.models["chat"].oldest_wait_s >= 0.0
    assert (stats.models["idle"].queue_depth, stats.models["idle"].oldest_wait_s) == (0, 0.0)
    assert stats.providers["p1"].capacity == 1
    normal.cancel()
    long.cancel()
