"""Fair queuing across principals: weighted shares charged by tokens, classes and aging."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edge.dispatch import Lease, ProviderPool, QueueFull, Share
from edge.dispatch.estimate import requested_output_tokens
from edge.dispatch.fair import CREDIT_TOKENS, VirtualClock
from tests.edge.dispatch.pool_helpers import (
    SHORT_TOKENS,
    make_pool,
    make_provider,
    queue_depth,
    wait_until,
)

HEAVY = Share("heavy", charge=100)
LIGHT = Share("light", charge=100)


def one_slot_pool(max_queue: int = 64, queue_timeout_s: float = 30.0) -> ProviderPool:
    provider = make_provider("p1", max_queue=max_queue, queue_timeout_s=queue_timeout_s)
    return make_pool([provider], {"chat": ["p1"]})


async def enqueue_as(pool: ProviderPool, share: Share) -> asyncio.Task:
    depth = queue_depth(pool, "chat")
    task = asyncio.create_task(pool.acquire("chat", SHORT_TOKENS, share=share))
    await wait_until(lambda: queue_depth(pool, "chat") == depth + 1)
    return task


async def next_served(held: Lease, tasks: dict[asyncio.Task, str]) -> tuple[str, Lease]:
    """Release the one slot: whose waiter got it, and its lease."""
    held.release()
    await wait_until(lambda: any(t.done() for t in tasks))
    task = next(t for t in tasks if t.done())
    return tasks.pop(task), task.result()


async def serve_in_turn(held: Lease, tasks: dict[asyncio.Task, str], count: int) -> list[str]:
    """Release the one slot ``count`` times; whose waiter got it each time."""
    order = []
    lease = held
    for _ in range(count):
        name, lease = await next_served(lease, tasks)
        order.append(name)
    lease.release()
    for task in tasks:
        task.cancel()
    return order


async def test_a_light_principal_waits_behind_one_heavy_request_not_the_whole_backlog() -> None:
    pool = one_slot_pool()
    held = await pool.acquire("chat", SHORT_TOKENS)
    tasks = {await enqueue_as(pool, HEAVY): "heavy" for _ in range(6)}
    tasks[await enqueue_as(pool, LIGHT)] = "light"

    assert await serve_in_turn(held, tasks, 3) == ["heavy", "light", "heavy"]


async def test_backlogged_principals_share_by_weight() -> None:
    pool = one_slot_pool()
    held = await pool.acquire("chat", SHORT_TOKENS)
    tasks = {}
    for _ in range(8):
        tasks[await enqueue_as(pool, Share("x", weight=3.0, charge=10))] = "x"
        tasks[await enqueue_as(pool, Share("y", weight=1.0, charge=10))] = "y"

    assert Counter(await serve_in_turn(held, tasks, 8)) == {"x": 6, "y": 2}


async def test_principals_are_charged_by_tokens_not_requests() -> None:
    pool = one_slot_pool()
    held = await pool.acquire("chat", SHORT_TOKENS)
    tasks = {await enqueue_as(pool, Share("big", charge=1000)): "big" for _ in range(3)}
    for _ in range(12):
        tasks[await enqueue_as(pool, Share("small", charge=100))] = "small"

    # Each "big" request costs ten "small" ones.
    assert Counter(await serve_in_turn(held, tasks, 12)) == {"big": 2, "small": 10}


async def test_each_principal_is_served_in_its_own_arrival_order() -> None:
    pool = one_slot_pool()
    held = await pool.acquire("chat", SHORT_TOKENS)
    tasks = {}
    for i in range(4):
        tasks[await enqueue_as(pool, Share("x", charge=10 * (4 - i)))] = f"x{i}"
        tasks[await enqueue_as(pool, Share("y", charge=5))] = f"y{i}"

    order = await serve_in_turn(held, tasks, 8)

    assert [o for o in order if o[0] == "x"] == ["x0", "x1", "x2", "x3"]
    assert [o for o in order if o[0] == "y"] == ["y0", "y1", "y2", "y3"]


async def test_a_principal_idle_meanwhile_banks_no_more_than_the_credit() -> None:
    heavy = Share("heavy", charge=CREDIT_TOKENS // 2)
    light = Share("light", charge=CREDIT_TOKENS // 2)
    pool = one_slot_pool()
    held = await pool.acquire("chat", SHORT_TOKENS)
    tasks = {await enqueue_as(pool, heavy): "heavy" for _ in range(4)}
    await serve_in_turn(held, tasks, 4)  # virtual time moves on while light sends nothing
    held = await pool.acquire("chat", SHORT_TOKENS)
    tasks = {await enqueue_as(pool, heavy): "heavy" for _ in range(3)}
    for _ in range(4):
        tasks[await enqueue_as(pool, light)] = "light"

    order = await serve_in_turn(held, tasks, 7)

    # Light goes ahead by its request at virtual "now" plus CREDIT_TOKENS (two requests), and
    # from then on the two alternate: the rest of its idle time earned nothing.
    assert order == ["light", "light", "light", "heavy", "light", "heavy", "heavy"]


async def test_a_full_queue_gives_the_heaviest_principals_newest_place_to_a_light_one() -> None:
    pool = one_slot_pool(max_queue=4)
    held = await pool.acquire("chat", SHORT_TOKENS)
    heavy = [await enqueue_as(pool, HEAVY) for _ in range(4)]

    with pytest.raises(QueueFull):
        await pool.acquire("chat", SHORT_TOKENS, share=HEAVY)
    light = asyncio.create_task(pool.acquire("chat", SHORT_TOKENS, share=LIGHT))
    await wait_until(heavy[-1].done)

    assert isinstance(heavy[-1].exception(), QueueFull)
    assert queue_depth(pool, "chat") == 4
    assert pool.queued_by_principal() == {"heavy": 3, "light": 1}
    held.release()
    await wait_until(heavy[0].done)
    heavy[0].result().release()
    (await asyncio.wait_for(light, 5)).release()
    for task in heavy[1:3]:
        task.cancel()
    await wait_until(lambda: not pool.queued_by_principal())


async def test_a_full_queue_turns_away_a_principal_as_heavy_as_the_others() -> None:
    pool = one_slot_pool(max_queue=2)
    held = await pool.acquire("chat", SHORT_TOKENS)
    waiters = [await enqueue_as(pool, HEAVY), await enqueue_as(pool, LIGHT)]

    with pytest.raises(QueueFull):
        await pool.acquire("chat", SHORT_TOKENS, share=Share("third"))
    assert not any(task.done() for task in waiters)
    held.release()
    for task in waiters:
        task.cancel()


async def serve_backlog(pool: ProviderPool, model: str, share: Share, count: int) -> None:
    """Queue ``count`` requests of ``share`` on ``model``'s one slot and serve them all."""
    held = await pool.acquire(model, SHORT_TOKENS)
    tasks = []
    for _ in range(count):
        depth = queue_depth(pool, model)
        tasks.append(asyncio.create_task(pool.acquire(model, SHORT_TOKENS, share=share)))
        await wait_until(lambda depth=depth: queue_depth(pool, model) == depth + 1)
    for task in tasks:
        held.release()
        held = await task
    held.release()


async def test_a_principals_share_is_counted_per_model() -> None:
    pool = make_pool(
        [make_provider("pa", max_queue=64), make_provider("pb", max_queue=64)],
        {"a": ["pa"], "b": ["pb"]},
    )
    await serve_backlog(pool, "a", HEAVY, 20)  # far past the credit, on model a
    held = await pool.acquire("b", SHORT_TOKENS)
    heavy = asyncio.create_task(pool.acquire("b", SHORT_TOKENS, share=HEAVY))
    await wait_until(lambda: queue_depth(pool, "b") == 1)
    light = asyncio.create_task(pool.acquire("b", SHORT_TOKENS, share=LIGHT))
    await wait_until(lambda: queue_depth(pool, "b") == 2)

    held.release()  # on b, heavy and light start even: the first to come goes first
    served = await heavy
    assert not light.done()
    served.release()
    (await light).release()


async def test_waiters_of_models_sharing_a_provider_compare_by_their_own_models_clock() -> None:
    pool = make_pool([make_provider("p1", max_queue=64)], {"a": ["p1"], "b": ["p1"]})
    await serve_backlog(pool, "b", Share("old", charge=1000), 20)  # b's clock far ahead of a's
    held = await pool.acquire("a", SHORT_TOKENS)
    backlog = [await enqueue_on(pool, "a", Share("w", charge=100)) for _ in range(5)]
    newcomer = await enqueue_on(pool, "b", Share("new", charge=100))

    # w's last tag on a is 400 (ahead of a's clock by 400); new's on b is b's clock less its
    # credit: smaller in b's terms, though a larger number than 400.
    held.release()
    first = await asyncio.wait_for(asyncio.shield(newcomer), 5)
    assert not any(task.done() for task in backlog)
    first.release()
    for task in backlog:
        (await task).release()


async def enqueue_on(pool: ProviderPool, model: str, share: Share) -> asyncio.Task:
    waiting = sum(queue_depth(pool, m) for m in ("a", "b"))
    task = asyncio.create_task(pool.acquire(model, SHORT_TOKENS, share=share))
    await wait_until(lambda: sum(queue_depth(pool, m) for m in ("a", "b")) == waiting + 1)
    return task


async def test_queued_by_principal_counts_waiters_until_they_leave() -> None:
    pool = one_slot_pool()
    held = await pool.acquire("chat", SHORT_TOKENS)
    first = await enqueue_as(pool, HEAVY)
    second = await enqueue_as(pool, HEAVY)
    await enqueue_as(pool, Share(""))  # a request without a principal

    assert pool.queued_by_principal() == {"heavy": 2, "": 1}
    second.cancel()
    await wait_until(lambda: pool.queued_by_principal() == {"heavy": 1, "": 1})
    held.release()
    await wait_until(first.done)
    assert pool.queued_by_principal() == {"": 1}
    first.result().release()
    await wait_until(lambda: not pool.queued_by_principal())


def run_on_virtual_clock(scenario: Callable[[list[float]], Coroutine[Any, Any, None]]) -> None:
    """Run ``scenario(now)`` on a loop whose clock only moves when the test sets ``now[0]``."""
    now = [0.0]
    loop = asyncio.new_event_loop()
    loop.time = lambda: now[0]  # type: ignore[method-assign]
    try:
        loop.run_until_complete(scenario(now))
    finally:
        loop.close()


def test_interactive_goes_before_batch_until_the_batch_request_ages() -> None:
    async def scenario(now: list[float]) -> None:
        pool = one_slot_pool(queue_timeout_s=10.0)
        held = await pool.acquire("chat", SHORT_TOKENS)
        batch = await enqueue_as(pool, Share("nightly", priority_class="batch"))
        tasks = {batch: "batch"}
        for _ in range(3):
            tasks[await enqueue_as(pool, Share("chat-ui"))] = "interactive"
        name, lease = await next_served(held, tasks)
        assert name == "interactive"

        now[0] = 4.9
        name, lease = await next_served(lease, tasks)
        assert name == "interactive"
        now[0] = 5.0  # half its queue timeout: it ages and competes on its tag (the oldest)
        assert await serve_in_turn(lease, tasks, 2) == ["batch", "interactive"]

    run_on_virtual_clock(scenario)


@given(
    weights=st.lists(st.sampled_from([0.5, 1.0, 2.0, 5.0]), min_size=2, max_size=4),
    charges=st.lists(st.integers(1, 500), min_size=40, max_size=40),
)
def test_backlogged_principals_get_service_within_one_request_of_their_weighted_share(
    weights: list[float], charges: list[int]
) -> None:
    """Start-time fair queuing's bound: while two principals are backlogged, their normalised
    service (tokens / weight) never differs by more than one largest request of each, plus the
    credit each may start with."""
    clock = VirtualClock()
    queue: list[tuple[float, int, int, int]] = []  # (tag, seq, principal, charge)
    for seq, charge in enumerate(charges):
        principal = seq % len(weights)
        start, _ = clock.tag(str(principal), weights[principal], charge)
        queue.append((start, seq, principal, charge))
    queue.sort()
    biggest = [
        max(c for i, c in enumerate(charges) if i % len(weights) == p) for p in range(len(weights))
    ]
    served = [0.0] * len(weights)
    left = Counter(principal for _, _, principal, _ in queue)
    for start, _, principal, charge in queue:
        clock.granted(start)
        served[principal] += charge
        left[principal] -= 1
        backlogged = [p for p in range(len(weights)) if left[p] > 0]
        for i in backlogged:
            for j in backlogged:
                gap = served[i] / weights[i] - served[j] / weights[j]
                bound = (biggest[i] + CREDIT_TOKENS) / weights[i] + biggest[j] / weights[j]
                assert gap <= bound + 1e-9


def test_a_withdrawn_request_is_not_charged_to_its_principal() -> None:
    clock = VirtualClock()
    clock.tag("x", 1.0, 10)
    start, finish = clock.tag("x", 1.0, 500)
    clock.withdrawn("x", start, finish)

    assert clock.tag("x", 1.0, 10) == (10.0, 20.0)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"weight": 0}, "weight"),
        ({"weight": float("nan")}, "weight"),
        ({"priority_class": "urgent"}, "priority_class"),
        ({"charge": -1}, "charge"),
    ],
)
def test_a_bad_share_is_refused_naming_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        Share("x", **kwargs)


def test_requested_output_tokens_reads_the_first_limit_the_body_sets() -> None:
    keys = ("max_completion_tokens", "max_tokens")
    assert requested_output_tokens({"max_tokens": 64}, keys) == 64
    assert requested_output_tokens({"max_completion_tokens": 8, "max_tokens": 64}, keys) == 8
    assert requested_output_tokens({"max_tokens": True}, keys) == 0
    assert requested_output_tokens({}, keys) == 0
