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


def shared_over(pool_snapshot: PoolSnapshot, providers, models) -> PoolSnapshot:
    return make_snapshot(providers, models).sharing(pool_snapshot)


async def test_a_snapshot_built_over_the_one_in_force_swaps_in_by_its_delta():
    a, b, c = make_provider("a"), make_provider("b"), make_provider("c")
    first = make_snapshot([a, b, c], {"m": ["a", "b", "c"]})
    pool = make_pool([], {})
    pool.apply_snapshot(first)
    held_a = await pool.acquire("m", SHORT_TOKENS)  # round-robin: a first
    assert held_a.provider_id == "a"
    held_b = await pool.acquire("m", SHORT_TOKENS)

    # a drops out while its lease is held; b gets capacity 2; c is unchanged.
    second = shared_over(first, [make_provider("b", capacity=2), c], {"m": ["b", "c"]})
    assert second.delta_over(first) is not None
    assert [p.id for p in second.delta.providers] == ["b"]
    assert second.delta.dropped_provider_ids == ("a",)
    pool.apply_snapshot(second)

    stats = pool.stats().providers
    assert stats["a"].in_flight == 1 and not stats["a"].listed  # counted until released
    assert stats["b"].capacity == 2 and stats["b"].in_flight == 1
    assert not pool.is_current(held_a) and pool.is_current(held_b)
    held_a.release()
    assert "a" not in pool.stats().providers  # gone once its last lease is back
    second_b = await pool.acquire("m", SHORT_TOKENS)
    third = await pool.acquire("m", SHORT_TOKENS)
    assert {second_b.provider_id, third.provider_id} == {"b", "c"}
    for lease in (held_b, second_b, third):
        lease.release()
    assert all(p.in_flight == 0 for p in pool.stats().providers.values())


def test_a_delta_over_another_snapshot_than_the_one_in_force_is_not_used():
    a = make_provider("a")
    first = make_snapshot([a], {"m": ["a"]})
    other = make_snapshot([a], {"m": ["a"]})
    second = make_snapshot([a, make_provider("b")], {"m": ["a", "b"]}).sharing(other)

    assert second.delta_over(first) is None and second.delta_over(None) is None
    pool = make_pool([], {})
    pool.apply_snapshot(first)
    pool.apply_snapshot(second)  # a full swap: every provider visited
    assert set(pool.stats().providers) == {"a", "b"}
