"""Passive health on an injected clock: failing providers leave for a cooldown, come back
half-open with one trial run; a Node's next session starts its providers healthy."""

from __future__ import annotations

import asyncio

import pytest

from edge.dispatch import Lease, NoProviderAvailable, PassiveHealthPolicy, ProviderPool
from tests.edge.dispatch.pool_helpers import (
    NODE_A,
    NODE_B,
    SHORT_TOKENS,
    enqueue,
    granted,
    make_provider,
    make_snapshot,
    queue_depth,
    wait_until,
)

POLICY = PassiveHealthPolicy(failures=3, window_s=10.0, cooldown_s=30.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(providers=None, policy: PassiveHealthPolicy = POLICY) -> tuple[ProviderPool, Clock]:
    providers = providers or [make_provider("p1", capacity=4)]
    clock = Clock()
    snapshot = make_snapshot(providers, {"chat": [p.id for p in providers]}, passive_health=policy)
    pool = ProviderPool(snapshot, clock=clock)
    for node in (NODE_A, NODE_B):
        pool.set_node_ready(node, True)
    return pool, clock


async def fail(pool: ProviderPool, times: int = 1, *, trip: bool = False) -> None:
    for _ in range(times):
        with pool.try_acquire("chat", SHORT_TOKENS) as lease:
            pool.report_failure(lease, "upstream_unavailable", trip=trip)


def state(pool: ProviderPool, provider_id: str = "p1") -> tuple[str, str, bool]:
    stats = pool.stats().providers[provider_id]
    return stats.passive_state, stats.passive_reason, stats.healthy


async def test_failures_within_the_window_take_the_provider_out() -> None:
    pool, _ = make()

    await fail(pool, 2)
    assert state(pool) == ("closed", "", True)
    assert pool.stats().providers["p1"].recent_failures == 2
    await fail(pool)

    assert state(pool) == ("open", "upstream_unavailable", False)
    assert pool.stats().providers["p1"].reopens_in_s == 30.0
    with pytest.raises(NoProviderAvailable) as error:
        await pool.acquire("chat", SHORT_TOKENS)
    assert error.value.reasons == (("p1", "upstream_unavailable"),)


async def test_failures_older_than_the_window_do_not_count() -> None:
    pool, clock = make()

    await fail(pool, 2)
    clock.now += 10.5
    await fail(pool, 2)

    assert state(pool)[0] == "closed"
    assert pool.stats().providers["p1"].recent_failures == 2


async def test_successes_do_not_undo_failures_inside_the_window() -> None:
    pool, _ = make()

    for _ in range(3):
        with pool.try_acquire("chat", SHORT_TOKENS) as lease:
            pool.report_success(lease)
        await fail(pool)

    assert state(pool)[0] == "open"


async def test_the_other_providers_take_the_traffic_meanwhile() -> None:
    pool, _ = make([make_provider("p1", priority=1), make_provider("p2", priority=2)])

    await fail(pool, 3)

    lease = await pool.acquire("chat", SHORT_TOKENS)
    assert lease.provider_id == "p2"
    lease.release()


async def test_after_the_cooldown_one_trial_run_decides() -> None:
    pool, clock = make([make_provider("p1", capacity=4)])
    await fail(pool, 3)
    clock.now += 30.0
    assert state(pool) == ("half_open", "upstream_unavailable", True)

    trial = pool.try_acquire("chat", SHORT_TOKENS)
    assert trial is not None
    assert pool.try_acquire("chat", SHORT_TOKENS) is None  # only the trial while half-open
    waiter = await enqueue(pool, "chat")
    pool.report_success(trial)

    assert state(pool) == ("closed", "", True)
    follower = await granted(waiter)  # admitted as soon as it closed
    trial.release()
    follower.release()
    assert queue_depth(pool, "chat") == 0


async def test_a_failed_trial_opens_it_again_for_a_whole_cooldown() -> None:
    pool, clock = make()
    await fail(pool, 3)
    clock.now += 31.0

    trial = pool.try_acquire("chat", SHORT_TOKENS)
    pool.report_failure(trial, "upstream_error (HTTP 503)")
    trial.release()

    assert state(pool) == ("open", "upstream_error (HTTP 503)", False)
    assert pool.stats().providers["p1"].reopens_in_s == 30.0
    clock.now += 29.0
    assert pool.try_acquire("chat", SHORT_TOKENS) is None


async def test_a_trial_that_ends_without_a_verdict_hands_the_trial_on() -> None:
    pool, clock = make()
    await fail(pool, 3)
    clock.now += 30.0
    trial = pool.try_acquire("chat", SHORT_TOKENS)
    waiter = await enqueue(pool, "chat")

    trial.release()  # e.g. the caller went away

    second = await granted(waiter)
    assert pool.try_acquire("chat", SHORT_TOKENS) is None  # the new trial is out
    pool.report_success(second)
    assert state(pool)[0] == "closed"
    second.release()


async def test_only_the_trial_counts_while_half_open() -> None:
    pool, clock = make()
    old = pool.try_acquire("chat", SHORT_TOKENS)  # started before the provider went out
    await fail(pool, 3)
    clock.now += 30.0
    trial = pool.try_acquire("chat", SHORT_TOKENS)

    pool.report_failure(old, "upstream_timeout")
    pool.report_success(old)
    assert state(pool)[0] == "half_open"
    pool.report_success(trial)
    assert state(pool)[0] == "closed"
    for lease in (old, trial):
        lease.release()


async def test_a_trip_takes_it_out_at_once_even_with_failure_counting_off() -> None:
    pool, _ = make(policy=PassiveHealthPolicy(failures=0))

    await fail(pool, 5)
    assert state(pool)[0] == "closed"
    with pool.try_acquire("chat", SHORT_TOKENS) as lease:
        pool.report_failure(lease, "upstream_auth_failed", trip=True)

    assert state(pool) == ("open", "upstream_auth_failed", False)


async def test_waiters_nobody_else_would_serve_fail_when_it_goes_out() -> None:
    pool, _ = make([make_provider("p1", capacity=1)])
    lease = pool.try_acquire("chat", SHORT_TOKENS)
    waiter = await enqueue(pool, "chat")

    pool.report_failure(lease, "upstream_auth_failed", trip=True)

    with pytest.raises(NoProviderAvailable):
        await waiter
    lease.release()


async def test_a_cooled_provider_admits_waiters_at_the_next_acquire() -> None:
    pool, clock = make([make_provider("p1", priority=1), make_provider("p2", priority=2)])
    await fail(pool, 3)
    busy = await pool.acquire("chat", SHORT_TOKENS)
    assert busy.provider_id == "p2"
    waiter = await enqueue(pool, "chat")
    clock.now += 30.0

    newcomer = asyncio.create_task(pool.acquire("chat", SHORT_TOKENS))  # ends the cooldown

    trial = await granted(waiter)  # the older waiter gets the trial
    assert trial.provider_id == "p1"
    await wait_until(lambda: queue_depth(pool, "chat") == 1)
    assert not newcomer.done()
    newcomer.cancel()
    for held in (trial, busy):
        held.release()


async def test_a_live_policy_change_applies_to_the_next_failures() -> None:
    pool, _ = make()
    stricter = PassiveHealthPolicy(failures=1, window_s=10.0, cooldown_s=5.0)

    pool.apply_snapshot(
        make_snapshot([make_provider("p1", capacity=4)], {"chat": ["p1"]}, passive_health=stricter)
    )
    await fail(pool)

    assert state(pool)[0] == "open"
    assert pool.stats().providers["p1"].reopens_in_s == 5.0


async def test_a_live_cooldown_change_applies_to_a_provider_already_out() -> None:
    pool, clock = make()
    await fail(pool, 3)
    clock.now += 10.0
    assert pool.try_acquire("chat", SHORT_TOKENS) is None

    shorter = PassiveHealthPolicy(failures=3, window_s=10.0, cooldown_s=10.0)
    pool.apply_snapshot(
        make_snapshot([make_provider("p1", capacity=4)], {"chat": ["p1"]}, passive_health=shorter)
    )

    trial = pool.try_acquire("chat", SHORT_TOKENS)
    assert trial is not None and state(pool)[0] == "half_open"
    trial.release()


async def test_the_nodes_health_detail_is_kept_with_its_report() -> None:
    pool, _ = make()

    pool.set_provider_health("p1", False, "GET /models failed: connection refused")

    stats = pool.stats().providers["p1"]
    assert (stats.healthy, stats.health_detail) == (False, "GET /models failed: connection refused")
    pool.set_provider_health("p1", False, "GET /models: HTTP 404")
    assert pool.stats().providers["p1"].health_detail == "GET /models: HTTP 404"


async def test_a_node_that_goes_away_comes_back_with_its_providers_healthy() -> None:
    pool, _ = make([make_provider("p1"), make_provider("p2", node=NODE_B)])
    pool.set_provider_health("p1", False, "node draining")
    await fail(pool, 3)  # p2 has all the traffic now: it goes out too
    assert not pool.stats().providers["p2"].healthy

    for ready in (False, True):
        pool.set_node_ready(NODE_A, ready)
        pool.set_node_ready(NODE_B, ready)

    for provider_id in ("p1", "p2"):
        stats = pool.stats().providers[provider_id]
        assert (stats.healthy, stats.health_detail, stats.passive_state) == (True, "", "closed")
    lease: Lease = await pool.acquire("chat", SHORT_TOKENS)
    lease.release()
