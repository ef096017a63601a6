"""Waiting: queue bound, timeout, FIFO, cross-model fairness and cancellation (DESIGN §4.5)."""

from __future__ import annotations

import asyncio

import pytest

from edge.dispatch import EdgeShuttingDown, NoProviderAvailable, QueueFull, QueueTimeout
from tests.edge.dispatch.pool_helpers import (
    LONG_TOKENS,
    SHORT_TOKENS,
    enqueue,
    granted,
    in_flight,
    long_in_flight,
    make_pool,
    make_provider,
    queue_depth,
    wait_until,
)


async def test_it_queues_a_request_and_admits_it_when_a_slot_frees() -> None:
    pool = make_pool([make_provider("p1")], {"chat": ["p1"]})
    held = await pool.acquire("chat", SHORT_TOKENS)
    waiter = await enqueue(pool, "chat")

    held.release()
    lease = await granted(waiter)

    assert lease.provider_id == "p1"
    assert lease.queued_ms >= 0.0
    assert in_flight(pool, "p1") == 1
    assert queue_depth(pool, "chat") == 0


async def test_it_admits_waiters_of_a_model_in_arrival_order() -> None:
    pool = make_pool([make_provider("p1")], {"chat": ["p1"]})
    held = await pool.acquire("chat", SHORT_TOKENS)
    waiters = [await enqueue(pool, "chat") for _ in range(3)]

    held.release()
    first = await granted(waiters[0])

    assert not waiters[1].done() and not waiters[2].done()
    first.release()
    second = await granted(waiters[1])
    assert not waiters[2].done()
    second.release()
    (await granted(waiters[2])).release()


async def test_it_bounds_the_queue_by_the_sum_of_max_queue_of_serving_providers() -> None:
    pool = make_pool(
        [
            make_provider("p1", max_queue=1),
            make_provider("p2", max_queue=2),
            make_provider("p-off", max_queue=50, enabled=False),
        ],
        {"chat": ["p1", "p2", "p-off"]},
    )
    held = [await pool.acquire("chat", SHORT_TOKENS) for _ in range(2)]
    waiters = [await enqueue(pool, "chat") for _ in range(3)]

    with pytest.raises(QueueFull) as raised:
        await pool.acquire("chat", SHORT_TOKENS)

    assert (raised.value.status, raised.value.retry_after) == (429, 1)
    for lease in held:
        lease.release()
    for waiter in waiters:
        (await granted(waiter)).release()


async def test_it_rejects_at_once_when_max_queue_is_zero() -> None:
    pool = make_pool([make_provider("p1", max_queue=0)], {"chat": ["p1"]})
    await pool.acquire("chat", SHORT_TOKENS)

    with pytest.raises(QueueFull):
        await pool.acquire("chat", SHORT_TOKENS)


async def test_it_times_out_after_the_largest_queue_timeout_of_serving_providers() -> None:
    pool = make_pool(
        [make_provider("p1", queue_timeout_s=0.01), make_provider("p2", queue_timeout_s=0.05)],
        {"chat": ["p1", "p2"]},
    )
    for _ in range(2):
        await pool.acquire("chat", SHORT_TOKENS)
    loop = asyncio.get_running_loop()
    started = loop.time()

    with pytest.raises(QueueTimeout) as raised:
        await pool.acquire("chat", SHORT_TOKENS)

    assert loop.time() - started >= 0.05
    assert (raised.value.code, raised.value.status, raised.value.retry_after) == (
        "queue_timeout",
        429,
        1,
    )
    assert queue_depth(pool, "chat") == 0


async def test_it_frees_the_queue_place_of_a_timed_out_waiter() -> None:
    pool = make_pool([make_provider("p1", max_queue=1, queue_timeout_s=0.05)], {"chat": ["p1"]})
    await pool.acquire("chat", SHORT_TOKENS)
    with pytest.raises(QueueTimeout):
        await pool.acquire("chat", SHORT_TOKENS)

    waiter = await enqueue(pool, "chat")

    assert not waiter.done()
    waiter.cancel()


async def test_it_fails_no_provider_available_at_once_when_none_would_serve() -> None:
    pool = make_pool([make_provider("p1")], {"chat": ["p1"]})
    pool.set_provider_health("p1", False)

    with pytest.raises(NoProviderAvailable) as raised:
        await pool.acquire("chat", SHORT_TOKENS)

    assert raised.value.retry_after == 5
    assert queue_depth(pool, "chat") == 0


async def test_it_gives_a_freed_slot_to_the_oldest_waiter_across_models() -> None:
    pool = make_pool([make_provider("shared")], {"chat": ["shared"], "code": ["shared"]})
    held = await pool.acquire("chat", SHORT_TOKENS)
    code_waiter = await enqueue(pool, "code")
    chat_waiter = await enqueue(pool, "chat")

    held.release()
    lease = await granted(code_waiter)

    assert (lease.model, lease.served_model) == ("code", "code@shared")
    assert not chat_waiter.done()
    lease.release()
    assert (await granted(chat_waiter)).model == "chat"


async def test_it_lets_a_normal_waiter_pass_a_long_waiter_that_cannot_take_the_slot() -> None:
    pool = make_pool([make_provider("p1", capacity=2, long_slots=1)], {"chat": ["p1"]})
    long_held = await pool.acquire("chat", LONG_TOKENS)
    normal_held = await pool.acquire("chat", SHORT_TOKENS)
    long_waiter = await enqueue(pool, "chat", LONG_TOKENS)
    normal_waiter = await enqueue(pool, "chat", SHORT_TOKENS)

    normal_held.release()
    lease = await granted(normal_waiter)

    assert lease.context_class == "normal"
    assert not long_waiter.done()
    long_held.release()
    lease.release()
    assert (await granted(long_waiter)).context_class == "long"
    assert long_in_flight(pool, "p1") == 1


async def test_it_gives_a_freed_slot_to_an_older_long_waiter_when_a_long_slot_is_free() -> None:
    pool = make_pool([make_provider("p1", capacity=1, long_slots=1)], {"chat": ["p1"]})
    held = await pool.acquire("chat", SHORT_TOKENS)
    long_waiter = await enqueue(pool, "chat", LONG_TOKENS)
    normal_waiter = await enqueue(pool, "chat", SHORT_TOKENS)

    held.release()

    assert (await granted(long_waiter)).context_class == "long"
    assert not normal_waiter.done()
    normal_waiter.cancel()


async def test_it_does_not_queue_long_requests_for_providers_with_zero_long_slots() -> None:
    pool = make_pool(
        [make_provider("p-none", long_slots=0), make_provider("p-long", long_slots=1)],
        {"chat": ["p-none", "p-long"]},
    )
    await pool.acquire("chat", LONG_TOKENS)  # p-long's only slot
    pool.set_provider_health("p-long", False)  # p-none is free but takes no long requests

    with pytest.raises(NoProviderAvailable):
        await pool.acquire("chat", LONG_TOKENS)


async def test_it_skips_a_cancelled_waiter() -> None:
    pool = make_pool([make_provider("p1")], {"chat": ["p1"]})
    held = await pool.acquire("chat", SHORT_TOKENS)
    cancelled = await enqueue(pool, "chat")
    waiter = await enqueue(pool, "chat")

    cancelled.cancel()
    await wait_until(lambda: queue_depth(pool, "chat") == 1)
    held.release()

    assert (await granted(waiter)).provider_id == "p1"
    assert cancelled.cancelled()
    assert in_flight(pool, "p1") == 1


async def test_it_takes_back_a_slot_granted_to_a_waiter_cancelled_in_the_same_turn() -> None:
    pool = make_pool([make_provider("p1")], {"chat": ["p1"]})
    held = await pool.acquire("chat", SHORT_TOKENS)
    waiter = await enqueue(pool, "chat")

    held.release()  # grants the slot to the waiter, which has not run yet
    waiter.cancel()
    await wait_until(waiter.done)

    assert waiter.cancelled()
    assert in_flight(pool, "p1") == 0
    assert queue_depth(pool, "chat") == 0


async def test_it_passes_a_slot_from_a_cancelled_grant_to_the_next_waiter() -> None:
    pool = make_pool([make_provider("p1")], {"chat": ["p1"]})
    held = await pool.acquire("chat", SHORT_TOKENS)
    cancelled = await enqueue(pool, "chat")
    waiter = await enqueue(pool, "chat")

    held.release()
    cancelled.cancel()

    assert (await granted(waiter)).provider_id == "p1"
    assert in_flight(pool, "p1") == 1


async def test_it_keeps_count_when_many_waiters_cancel_from_the_middle() -> None:
    pool = make_pool([make_provider("p1", max_queue=500)], {"chat": ["p1"]})
    held = await pool.acquire("chat", SHORT_TOKENS)
    first = await enqueue(pool, "chat")
    middle = [asyncio.create_task(pool.acquire("chat", SHORT_TOKENS)) for _ in range(200)]
    await wait_until(lambda: queue_depth(pool, "chat") == 201)
    last = await enqueue(pool, "chat")

    for task in middle:
        task.cancel()
    await wait_until(lambda: queue_depth(pool, "chat") == 2)
    held.release()
    (await granted(first)).release()

    assert (await granted(last)).provider_id == "p1"
    assert queue_depth(pool, "chat") == 0


async def test_a_stopping_edge_answers_every_waiter_at_once() -> None:
    pool = make_pool([make_provider("p1", capacity=1)], {"chat": ["p1"]})
    held = pool.try_acquire("chat", SHORT_TOKENS)
    waiters = [await enqueue(pool, "chat") for _ in range(3)]

    pool.fail_waiting()

    for waiter in waiters:
        with pytest.raises(EdgeShuttingDown) as caught:
            await waiter
        assert (caught.value.status, caught.value.code) == (503, "edge_shutting_down")
    assert queue_depth(pool, "chat") == 0
    assert held is not None
    held.release()
