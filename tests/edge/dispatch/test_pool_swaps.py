"""Snapshot swaps: what carries over and what does not."""

from __future__ import annotations

from edge.dispatch import ModelSpec, PoolSnapshot
from tests.edge.dispatch.pool_helpers import (
    NODE_B,
    SHORT_TOKENS,
    enqueue,
    in_flight,
    make_pool,
    make_provider,
    make_snapshot,
)


async def test_a_swap_keeps_the_round_robin_turn():
    providers = [make_provider("a", capacity=9), make_provider("b", capacity=9)]
    pool = make_pool(providers, {"m": ["a", "b"]})
    picked = []
    for _ in range(4):
        lease = await pool.acquire("m", SHORT_TOKENS)
        picked.append(lease.provider_id)
        lease.release()
        pool.apply_snapshot(make_snapshot(providers, {"m": ["a", "b"]}))  # e.g. a no-change apply

    assert picked == ["a", "b", "a", "b"]


async def test_a_lease_granted_before_a_swap_that_removed_its_route_is_not_current():
    pool = make_pool([make_provider("a"), make_provider("b")], {"m": ["a"]})
    held = await pool.acquire("m", SHORT_TOKENS)
    waiter = await enqueue(pool, "m")

    held.release()  # grants the waiter a's slot ...
    pool.apply_snapshot(make_snapshot([make_provider("b")], {"m": ["b"]}))  # ... then a goes
    lease = await waiter

    assert lease.provider_id == "a" and not pool.is_current(lease)
    lease.release()
    fresh = await pool.acquire("m", SHORT_TOKENS)
    assert fresh.provider_id == "b" and pool.is_current(fresh)


async def test_a_changed_served_name_makes_a_lease_stale():
    pool = make_pool([make_provider("a", capacity=2)], {"m": ["a"]})
    lease = await pool.acquire("m", SHORT_TOKENS)
    assert pool.is_current(lease)

    pool.apply_snapshot(
        PoolSnapshot((make_provider("a", capacity=2),), (ModelSpec("m", {"a": "renamed"}),), 1000)
    )

    assert not pool.is_current(lease)


async def test_a_provider_moved_to_another_node_starts_afresh():
    pool = make_pool([make_provider("a", capacity=1)], {"m": ["a"]})
    on_old_node = await pool.acquire("m", SHORT_TOKENS)
    pool.set_provider_health("a", False)

    pool.apply_snapshot(make_snapshot([make_provider("a", capacity=1, node=NODE_B)], {"m": ["a"]}))

    # Neither the old Node's run nor its health count on the new Node.
    moved = await pool.acquire("m", SHORT_TOKENS)
    assert (moved.node_id, in_flight(pool, "a")) == (NODE_B, 1)
    on_old_node.release()
    assert in_flight(pool, "a") == 1
    moved.release()
    assert in_flight(pool, "a") == 0
