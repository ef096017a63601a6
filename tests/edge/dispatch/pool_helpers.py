"""Hand-written builders for pool tests: providers, snapshots and a ready pool."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping

from edge.dispatch import (
    Lease,
    ModelSpec,
    PassiveHealthPolicy,
    PoolSnapshot,
    ProviderPool,
    ProviderSpec,
)

NODE_A = "node-a"
NODE_B = "node-b"
THRESHOLD = 1000
LONG_TOKENS = THRESHOLD
SHORT_TOKENS = 10


def make_provider(
    provider_id: str,
    *,
    node: str = NODE_A,
    capacity: int = 1,
    priority: int = 100,
    long_slots: int | None = None,
    enabled: bool = True,
    max_queue: int = 8,
    queue_timeout_s: float = 30.0,
) -> ProviderSpec:
    return ProviderSpec(
        id=provider_id,
        node_id=node,
        adapter_id=f"adapter-{provider_id}",
        served_models=("served",),
        enabled=enabled,
        capacity=capacity,
        long_context_slots=long_slots,
        priority=priority,
        max_queue=max_queue,
        queue_timeout_s=queue_timeout_s,
    )


def make_snapshot(
    providers: Iterable[ProviderSpec],
    models: Mapping[str, Iterable[str]],
    threshold: int = THRESHOLD,
    passive_health: PassiveHealthPolicy | None = None,
) -> PoolSnapshot:
    """``models``: model id -> the provider ids it routes to, each serving ``<model>@<p>``."""
    specs = tuple(
        ModelSpec(id=model, routes={p: f"{model}@{p}" for p in provider_ids})
        for model, provider_ids in models.items()
    )
    return PoolSnapshot(tuple(providers), specs, threshold, passive_health or PassiveHealthPolicy())


def make_pool(
    providers: Iterable[ProviderSpec],
    models: Mapping[str, Iterable[str]],
    *,
    ready: Iterable[str] = (NODE_A, NODE_B),
    threshold: int = THRESHOLD,
) -> ProviderPool:
    pool = ProviderPool(make_snapshot(providers, models, threshold))
    for node in ready:
        pool.set_node_ready(node, True)
    return pool


def in_flight(pool: ProviderPool, provider_id: str) -> int:
    return pool.stats().providers[provider_id].in_flight


def long_in_flight(pool: ProviderPool, provider_id: str) -> int:
    return pool.stats().providers[provider_id].long_in_flight


def queue_depth(pool: ProviderPool, model: str) -> int:
    return pool.stats().models[model].queue_depth


async def wait_until(condition: Callable[[], bool], turns: int = 100) -> None:
    """Let the loop run until ``condition`` holds; fail instead of hanging."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


async def enqueue(pool: ProviderPool, model: str, tokens: int = SHORT_TOKENS) -> asyncio.Task:
    """Start an acquire that has to wait, and return once it sits in the queue."""
    depth = queue_depth(pool, model)
    task = asyncio.create_task(pool.acquire(model, tokens))
    await wait_until(lambda: queue_depth(pool, model) == depth + 1)
    return task


async def granted(task: asyncio.Task) -> Lease:
    await wait_until(task.done)
    return task.result()
