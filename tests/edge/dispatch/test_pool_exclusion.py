"""Acquiring without some providers (a run failing over): never one it excludes, waiting apart."""

from __future__ import annotations

import asyncio

import pytest

from edge.dispatch import ModelNotFound, NoProviderAvailable, QueueFull
from tests.edge.dispatch.pool_helpers import (
    LONG_TOKENS,
    SHORT_TOKENS,
    granted,
    in_flight,
    make_pool,
    make_provider,
    make_snapshot,
    queue_depth,
    wait_until,
)


async def excluding(pool, model: str, *provider_ids: str, tokens: int = SHORT_TOKENS):
    """Start an acquire that excludes ``provider_ids`` and has to wait; return once it waits."""
    depth = queue_depth(pool, model)
    task = asyncio.create_task(pool.acquire(model, tokens, frozenset(provider_ids)))
    await wait_until(lambda: queue_depth(pool, model) == depth + 1)
    return task


async def test_it_never_grants_an_excluded_provider_even_when_it_is_the_best_and_free() -> None:
    pool = make_pool(
        [make_provider("p1", priority=1, capacity=4), make_provider("p2", priority=2)],
        {"chat": ["p1", "p2"]},
    )

    lease = await pool.acquire("chat", SHORT_TOKENS, frozenset({"p1"}))

    assert lease.provider_id == "p2"
    assert pool.try_acquire("chat", SHORT_TOKENS, frozenset({"p1", "p2"})) is None


async def test_with_every_provider_excluded_there_is_none_available() -> None:
    pool = make_pool([make_provider("p1"), make_provider("p2")], {"chat": ["p1", "p2"]})

    with pytest.raises(NoProviderAvailable) as error:
        await pool.acquire("chat", SHORT_TOKENS, frozenset({"p1", "p2"}))

    assert error.value.reasons == (("p1", "failed this request"), ("p2", "failed this request"))
    assert queue_depth(pool, "chat") == 0


async def test_an_excluding_waiter_is_passed_by_a_slot_it_excludes_and_takes_the_next() -> None:
    pool = make_pool([make_provider("p1"), make_provider("p2")], {"chat": ["p1", "p2"]})
    held_1 = await pool.acquire("chat", SHORT_TOKENS)
    held_2 = await pool.acquire("chat", SHORT_TOKENS)
    assert {held_1.provider_id, held_2.provider_id} == {"p1", "p2"}
    on_p1, on_p2 = sorted((held_1, held_2), key=lambda lease: lease.provider_id)
    picky = await excluding(pool, "chat", "p1")  # the older waiter, but not for p1
    plain = await excluding(pool, "chat")

    on_p1.release()
    lease = await granted(plain)
    assert lease.provider_id == "p1" and not picky.done()

    on_p2.release()
    assert (await granted(picky)).provider_id == "p2"
    assert queue_depth(pool, "chat") == 0


async def test_an_excluding_waiter_keeps_its_place_among_the_others() -> None:
    pool = make_pool([make_provider("p1"), make_provider("p2")], {"chat": ["p1", "p2"]})
    held = [await pool.acquire("chat", SHORT_TOKENS) for _ in range(2)]
    on_p2 = next(lease for lease in held if lease.provider_id == "p2")
    picky = await excluding(pool, "chat", "p1")
    plain = await excluding(pool, "chat")

    on_p2.release()  # both could take it: the older one does

    assert (await granted(picky)).provider_id == "p2" and not plain.done()
    plain.cancel()


async def test_excluding_waiters_count_against_the_queue_bound() -> None:
    pool = make_pool(
        [make_provider("p1", max_queue=1), make_provider("p2", max_queue=0)], {"chat": ["p1", "p2"]}
    )
    held = [await pool.acquire("chat", SHORT_TOKENS) for _ in range(2)]
    picky = await excluding(pool, "chat", "p2")

    with pytest.raises(QueueFull):
        await pool.acquire("chat", SHORT_TOKENS)
    assert pool.stats().models["chat"].queue_depth == 1

    picky.cancel()
    await wait_until(lambda: queue_depth(pool, "chat") == 0)
    for lease in held:
        lease.release()
    assert (in_flight(pool, "p1"), in_flight(pool, "p2")) == (0, 0)


async def test_a_cancelled_excluding_waiter_leaves_and_takes_nothing() -> None:
    pool = make_pool([make_provider("p1"), make_provider("p2")], {"chat": ["p1", "p2"]})
    held = [await pool.acquire("chat", SHORT_TOKENS) for _ in range(2)]
    picky = await excluding(pool, "chat", "p1")

    picky.cancel()
    with pytest.raises(asyncio.CancelledError):
        await picky
    for lease in held:
        lease.release()

    assert queue_depth(pool, "chat") == 0
    assert (in_flight(pool, "p1"), in_flight(pool, "p2")) == (0, 0)


async def test_an_excluding_waiter_fails_once_only_excluded_providers_would_serve_it() -> None:
    pool = make_pool(
        [make_provider("p1"), make_provider("p2", node="node-b")], {"chat": ["p1", "p2"]}
    )
    held = [await pool.acquire("chat", SHORT_TOKENS) for _ in range(2)]
    picky = await excluding(pool, "chat", "p1")
    plain = await excluding(pool, "chat")

    pool.set_node_ready("node-b", False)  # p2 goes: only p1 is left, which it excludes

    with pytest.raises(NoProviderAvailable) as error:
        await picky
    assert ("p2", "node not connected") in error.value.reasons
    assert not plain.done()  # p1 still serves it
    for lease in held:
        lease.release()
    assert (await granted(plain)).provider_id == "p1"


async def test_an_excluding_waiter_is_admitted_when_a_provider_it_may_use_turns_ready() -> None:
    pool = make_pool(
        [make_provider("p1"), make_provider("p2"), make_provider("p3", node="node-b")],
        {"chat": ["p1", "p2", "p3"]},
        ready=["node-a"],
    )
    held = await pool.acquire("chat", SHORT_TOKENS, frozenset({"p1"}))  # p2 busy, p1 free
    picky = await excluding(pool, "chat", "p1")

    pool.set_node_ready("node-b", True)

    assert (await granted(picky)).provider_id == "p3"
    assert in_flight(pool, "p1") == 0
    held.release()


async def test_a_long_excluding_waiter_takes_only_a_long_slot() -> None:
    pool = make_pool(
        [make_provider("p1", capacity=2, long_slots=1), make_provider("p2", capacity=2)],
        {"chat": ["p1", "p2"]},
    )
    long_held = await pool.acquire("chat", LONG_TOKENS, frozenset({"p2"}))
    assert long_held.provider_id == "p1"
    busy = [await pool.acquire("chat", SHORT_TOKENS, frozenset({"p1"})) for _ in range(2)]
    picky = await excluding(pool, "chat", "p2", tokens=LONG_TOKENS)

    normal_on_p1 = await pool.acquire("chat", SHORT_TOKENS, frozenset({"p2"}))
    assert normal_on_p1.provider_id == "p1" and not picky.done()  # p1's long slot is taken
    normal_on_p1.release()
    assert not picky.done()
    long_held.release()

    assert (await granted(picky)).context_class == "long"
    for lease in busy:
        lease.release()


async def test_an_excluding_waiter_of_a_model_a_refresh_removes_fails_model_not_found() -> None:
    providers = [make_provider("p1"), make_provider("p2")]
    pool = make_pool(providers, {"chat": ["p1", "p2"], "other": ["p1"]})
    held = [await pool.acquire("chat", SHORT_TOKENS) for _ in range(2)]
    picky = await excluding(pool, "chat", "p1")

    pool.apply_snapshot(make_snapshot(providers, {"other": ["p1", "p2"]}))

    with pytest.raises(ModelNotFound):
        await picky
    for lease in held:
        lease.release()


async def test_an_excluding_waiter_shows_in_the_queue_figures() -> None:
    pool = make_pool([make_provider("p1", long_slots=1)], {"chat": ["p1"]})
    held = await pool.acquire("chat", SHORT_TOKENS)
    pool.apply_snapshot(
        make_snapshot(
            [make_provider("p1", long_slots=1), make_provider("p2", long_slots=1)],
            {"chat": ["p1", "p2"]},
        )
    )
    on_p2 = await pool.acquire("chat", SHORT_TOKENS)
    assert on_p2.provider_id == "p2"
    picky = await excluding(pool, "chat", "p1", tokens=LONG_TOKENS)

    figures = pool.stats().models["chat"]
    assert (figures.queue_depth, figures.long_queue_depth) == (1, 1)
    assert figures.oldest_wait_s >= 0.0
    on_p2.release()
    assert (await granted(picky)).provider_id == "p2"
    held.release()
