"""Candidate filtering, priority, round-robin and long-context slots (DESIGN §4.1-4.4)."""

from __future__ import annotations

import pytest

from edge.dispatch import (
    ContextTooLong,
    DispatchError,
    ModelNotFound,
    NoProviderAvailable,
    ProviderPool,
    QueueFull,
    QueueTimeout,
)
from tests.edge.dispatch.pool_helpers import (
    LONG_TOKENS,
    NODE_A,
    NODE_B,
    SHORT_TOKENS,
    THRESHOLD,
    in_flight,
    long_in_flight,
    make_pool,
    make_provider,
)


async def providers_of(pool: ProviderPool, model: str, count: int, tokens: int = 10) -> list[str]:
    """Acquire and release ``count`` times; the providers chosen, in order."""
    chosen = []
    for _ in range(count):
        lease = await pool.acquire(model, tokens)
        chosen.append(lease.provider_id)
        lease.release()
    return chosen


async def test_it_leases_a_free_provider_with_where_to_send_the_run() -> None:
    pool = make_pool([make_provider("p1", node=NODE_B)], {"chat": ["p1"]})

    lease = await pool.acquire("chat", SHORT_TOKENS)

    assert lease.model == "chat"
    assert lease.provider_id == "p1"
    assert lease.node_id == NODE_B
    assert lease.adapter_id == "adapter-p1"
    assert lease.served_model == "chat@p1"
    assert lease.context_class == "normal"
    assert lease.queued_ms == 0.0
    assert in_flight(pool, "p1") == 1


async def test_it_raises_model_not_found_for_an_unknown_model() -> None:
    pool = make_pool([make_provider("p1")], {"chat": ["p1"]})

    with pytest.raises(ModelNotFound) as raised:
        await pool.acquire("nope", SHORT_TOKENS)

    assert raised.value.code == "model_not_found"
    assert raised.value.status == 404
    assert raised.value.retry_after is None
    assert "nope" in raised.value.message


@pytest.mark.parametrize(
    ("error", "code", "status", "retry_after"),
    [
        (ModelNotFound("m"), "model_not_found", 404, None),
        (NoProviderAvailable("m"), "no_provider_available", 503, 5),
        (QueueFull("m"), "queue_full", 429, 1),
        (QueueTimeout("m", 0.5), "queue_timeout", 429, 1),
    ],
)
def test_it_maps_each_error_to_a_code_status_and_retry_hint(
    error: DispatchError, code: str, status: int, retry_after: int | None
) -> None:
    assert (error.code, error.status, error.retry_after) == (code, status, retry_after)
    assert isinstance(error, DispatchError)


async def test_it_skips_providers_on_a_node_that_never_connected() -> None:
    pool = make_pool(
        [make_provider("p1", node=NODE_A, priority=1), make_provider("p2", node=NODE_B)],
        {"chat": ["p1", "p2"]},
        ready=[NODE_B],
    )

    assert await providers_of(pool, "chat", 3) == ["p2", "p2", "p2"]


async def test_it_skips_providers_of_a_node_that_is_no_longer_ready() -> None:
    pool = make_pool(
        [make_provider("p1", node=NODE_A, priority=1), make_provider("p2", node=NODE_B)],
        {"chat": ["p1", "p2"]},
    )
    pool.set_node_ready(NODE_A, False)

    assert await providers_of(pool, "chat", 2) == ["p2", "p2"]


async def test_it_skips_disabled_providers() -> None:
    pool = make_pool(
        [make_provider("p1", priority=1, enabled=False), make_provider("p2")],
        {"chat": ["p1", "p2"]},
    )

    assert await providers_of(pool, "chat", 2) == ["p2", "p2"]


async def test_it_skips_unhealthy_providers() -> None:
    pool = make_pool([make_provider("p1", priority=1), make_provider("p2")], {"chat": ["p1", "p2"]})
    pool.set_provider_health("p1", False)

    assert await providers_of(pool, "chat", 2) == ["p2", "p2"]


async def test_it_skips_full_providers() -> None:
    pool = make_pool(
        [make_provider("p1", priority=1, capacity=2), make_provider("p2")],
        {"chat": ["p1", "p2"]},
    )

    leases = [await pool.acquire("chat", SHORT_TOKENS) for _ in range(3)]

    assert [lease.provider_id for lease in leases] == ["p1", "p1", "p2"]


async def test_it_fails_at_once_when_no_provider_would_ever_serve() -> None:
    pool = make_pool(
        [make_provider("p1", enabled=False), make_provider("p2", node=NODE_B)],
        {"chat": ["p1", "p2"]},
        ready=[NODE_A],
    )

    with pytest.raises(NoProviderAvailable) as raised:
        await pool.acquire("chat", SHORT_TOKENS)

    assert raised.value.status == 503


async def test_it_prefers_the_lowest_priority_value() -> None:
    pool = make_pool(
        [
            make_provider("p-high", priority=200),
            make_provider("p-low", priority=5),
            make_provider("p-mid", priority=50),
        ],
        {"chat": ["p-high", "p-low", "p-mid"]},
    )

    assert await providers_of(pool, "chat", 3) == ["p-low", "p-low", "p-low"]


async def test_it_falls_back_to_the_next_priority_tier_when_the_first_is_full() -> None:
    pool = make_pool(
        [make_provider("p1", priority=1), make_provider("p2", priority=2)],
        {"chat": ["p1", "p2"]},
    )

    first = await pool.acquire("chat", SHORT_TOKENS)
    second = await pool.acquire("chat", SHORT_TOKENS)

    assert (first.provider_id, second.provider_id) == ("p1", "p2")


async def test_it_round_robins_between_providers_of_equal_priority() -> None:
    pool = make_pool(
        [make_provider(p, capacity=4) for p in ("p1", "p2", "p3")],
        {"chat": ["p1", "p2", "p3"]},
    )

    assert await providers_of(pool, "chat", 7) == ["p1", "p2", "p3", "p1", "p2", "p3", "p1"]


async def test_it_keeps_a_round_robin_position_per_model_group() -> None:
    pool = make_pool(
        [make_provider(p, capacity=4) for p in ("p1", "p2")],
        {"chat": ["p1", "p2"], "code": ["p1", "p2"]},
    )

    assert await providers_of(pool, "chat", 1) == ["p1"]
    assert await providers_of(pool, "code", 1) == ["p1"]
    assert await providers_of(pool, "chat", 1) == ["p2"]


async def test_it_round_robins_over_the_free_providers_only() -> None:
    pool = make_pool(
        [make_provider(p, capacity=1) for p in ("p1", "p2", "p3")],
        {"chat": ["p1", "p2", "p3"]},
    )
    held = await pool.acquire("chat", SHORT_TOKENS)  # p1 stays busy

    assert held.provider_id == "p1"
    assert await providers_of(pool, "chat", 4) == ["p2", "p3", "p2", "p3"]


@pytest.mark.parametrize(
    ("tokens", "context_class"),
    [(0, "normal"), (THRESHOLD - 1, "normal"), (THRESHOLD, "long"), (THRESHOLD * 5, "long")],
)
async def test_it_classifies_requests_at_or_above_the_threshold_as_long(
    tokens: int, context_class: str
) -> None:
    pool = make_pool([make_provider("p1")], {"chat": ["p1"]})

    lease = await pool.acquire("chat", tokens)

    assert lease.context_class == context_class


async def test_it_has_no_long_limit_when_long_slots_are_unset() -> None:
    pool = make_pool([make_provider("p1", capacity=3, long_slots=None)], {"chat": ["p1"]})

    leases = [await pool.acquire("chat", LONG_TOKENS) for _ in range(3)]

    assert {lease.context_class for lease in leases} == {"long"}
    assert (in_flight(pool, "p1"), long_in_flight(pool, "p1")) == (3, 3)


async def test_it_gives_no_long_request_to_a_provider_with_zero_long_slots() -> None:
    pool = make_pool(
        [make_provider("p-none", priority=1, long_slots=0), make_provider("p-any", capacity=2)],
        {"chat": ["p-none", "p-any"]},
    )

    assert (await pool.acquire("chat", LONG_TOKENS)).provider_id == "p-any"
    assert (await pool.acquire("chat", SHORT_TOKENS)).provider_id == "p-none"


async def test_a_long_request_no_provider_of_the_model_ever_takes_is_too_long() -> None:
    pool = make_pool([make_provider("p1", capacity=4, long_slots=0)], {"chat": ["p1"]})

    with pytest.raises(ContextTooLong) as error:
        await pool.acquire("chat", LONG_TOKENS)

    assert (error.value.status, error.value.code) == (400, "context_length_exceeded")
    assert error.value.retry_after is None


async def test_it_does_not_count_a_zero_slot_provider_as_one_that_would_serve_long() -> None:
    pool = make_pool(
        [make_provider("p1", capacity=4, long_slots=0), make_provider("p2", long_slots=1)],
        {"chat": ["p1", "p2"]},
    )
    pool.set_provider_health("p2", False)

    with pytest.raises(NoProviderAvailable) as error:
        await pool.acquire("chat", LONG_TOKENS)

    assert error.value.reasons == (("p1", "takes no long requests"), ("p2", "unhealthy"))


async def test_it_caps_long_requests_at_the_long_slots_and_holds_a_normal_slot_too() -> None:
    pool = make_pool(
        [make_provider("p1", priority=1, capacity=3, long_slots=1), make_provider("p2")],
        {"chat": ["p1", "p2"]},
    )

    first_long = await pool.acquire("chat", LONG_TOKENS)
    second_long = await pool.acquire("chat", LONG_TOKENS)
    normals = [await pool.acquire("chat", SHORT_TOKENS) for _ in range(2)]

    assert (first_long.provider_id, second_long.provider_id) == ("p1", "p2")
    assert (in_flight(pool, "p1"), long_in_flight(pool, "p1")) == (3, 1)
    assert [lease.provider_id for lease in normals] == ["p1", "p1"]


async def test_it_releases_idempotently() -> None:
    pool = make_pool([make_provider("p1", capacity=2, long_slots=1)], {"chat": ["p1"]})
    lease = await pool.acquire("chat", LONG_TOKENS)

    lease.release()
    lease.release()

    assert lease.released
    assert (in_flight(pool, "p1"), long_in_flight(pool, "p1")) == (0, 0)


async def test_it_releases_a_lease_used_as_a_context_manager() -> None:
    pool = make_pool([make_provider("p1")], {"chat": ["p1"]})

    with pytest.raises(RuntimeError), await pool.acquire("chat", SHORT_TOKENS):
        raise RuntimeError("run failed")

    assert in_flight(pool, "p1") == 0


async def test_it_admits_without_waiting_through_try_acquire() -> None:
    pool = make_pool([make_provider("p1")], {"chat": ["p1"]})

    lease = pool.try_acquire("chat", SHORT_TOKENS)

    assert lease is not None
    assert pool.try_acquire("chat", SHORT_TOKENS) is None
    with pytest.raises(ModelNotFound):
        pool.try_acquire("nope", SHORT_TOKENS)
