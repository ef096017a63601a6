"""Provider pool micro-benchmarks: uncontended acquire+release and a contended drain.

Run: ``.venv/bin/python bench/dispatch_bench.py [--quick]``. Prints a table; the last line is one
JSON object for scripts. Each figure is the best of several rounds, which filters out scheduler
noise on a shared machine; acquire is measured as callers use it (``await pool.acquire``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable, Coroutine
from typing import Any

from edge.dispatch import ModelSpec, PoolSnapshot, ProviderPool, ProviderSpec

NODE = "node-bench"


def provider(
    provider_id: str, capacity: int, max_queue: int = 64, queue_timeout_s: float = 600.0
) -> ProviderSpec:
    return ProviderSpec(
        id=provider_id,
        node_id=NODE,
        adapter_id="echo",
        served_models=("served",),
        enabled=True,
        capacity=capacity,
        long_context_slots=None,
        priority=100,
        max_queue=max_queue,
        queue_timeout_s=queue_timeout_s,
    )


def one_model_pool(candidates: int) -> ProviderPool:
    providers = tuple(provider(f"p{i}", capacity=8) for i in range(candidates))
    model = ModelSpec(id="m", routes={p.id: "served" for p in providers})
    pool = ProviderPool(PoolSnapshot(providers, (model,), 100_000))
    pool.set_node_ready(NODE, True)
    return pool


def many_models_pool(models: int, candidates: int, providers_total: int) -> ProviderPool:
    providers = tuple(provider(f"p{i}", capacity=8) for i in range(providers_total))
    # Spread each model's routes over the providers, so models share providers unevenly.
    specs = tuple(
        ModelSpec(
            id=f"m{i}",
            routes={providers[(i + k * 97) % providers_total].id: "s" for k in range(candidates)},
        )
        for i in range(models)
    )
    pool = ProviderPool(PoolSnapshot(providers, specs, 100_000))
    pool.set_node_ready(NODE, True)
    return pool


async def acquire_release_us(pool: ProviderPool, model_ids: list[str], iterations: int) -> float:
    acquire = pool.acquire
    count = len(model_ids)
    started = time.perf_counter()
    for i in range(iterations):
        lease = await acquire(model_ids[i % count], 100)
        lease.release()
    return (time.perf_counter() - started) / iterations * 1e6


async def drain_ms(waiters: int, slots: int) -> float:
    providers = (provider("p0", capacity=slots, max_queue=waiters),)
    pool = ProviderPool(PoolSnapshot(providers, (ModelSpec("m", {"p0": "served"}),), 100_000))
    pool.set_node_ready(NODE, True)

    async def one_request() -> None:
        lease = await pool.acquire("m", 100)
        await asyncio.sleep(0)  # hold the slot across a loop turn, as a real run would
        lease.release()

    started = time.perf_counter()
    await asyncio.gather(*(one_request() for _ in range(waiters)))
    elapsed = (time.perf_counter() - started) * 1000.0
    assert pool.stats().providers["p0"].in_flight == 0
    return elapsed


def best_of(rounds: int, make: Callable[[], Coroutine[Any, Any, float]]) -> float:
    return min(asyncio.run(make()) for _ in range(rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (< 30 s)")
    args = parser.parse_args()
    iterations, rounds = (20_000, 3) if args.quick else (200_000, 5)

    per_candidates: dict[str, float] = {}
    for candidates in (1, 10, 100, 1000):
        pool = one_model_pool(candidates)
        per_candidates[str(candidates)] = best_of(
            rounds, lambda pool=pool: acquire_release_us(pool, ["m"], iterations)
        )

    big = many_models_pool(models=10_000, candidates=10, providers_total=1000)
    model_ids = [f"m{i}" for i in range(10_000)]
    many_models = best_of(rounds, lambda: acquire_release_us(big, model_ids, iterations))
    drain = best_of(rounds, lambda: drain_ms(waiters=1000, slots=8))

    print(f"{'case':<44}{'figure':>12}")
    for candidates, us in per_candidates.items():
        print(f"{f'acquire+release, {candidates} candidates':<44}{us:>9.2f} us")
    print(f"{'acquire+release, 10 candidates, 10k models':<44}{many_models:>9.2f} us")
    print(f"{'drain 1,000 waiters on 8 slots':<44}{drain:>9.2f} ms")
    print(
        json.dumps(
            {
                "bench": "dispatch",
                "acquire_release_us": {k: round(v, 3) for k, v in per_candidates.items()},
                "acquire_release_us_10k_models": round(many_models, 3),
                "drain_1000_waiters_ms": round(drain, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
