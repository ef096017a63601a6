"""Fair queuing on a saturated pool: one heavy principal at 10x the request rate of four light ones.

Run: ``.venv/bin/python bench/fairness_bench.py [--quick]``. Drives the real ``ProviderPool``
in-process on an asyncio loop whose clock is simulated: arrivals (Poisson, seeded) and service
times (proportional to each request's tokens) are events on a virtual timeline, so the figures
measure the admission policy alone, the same on any machine. Four runs over the same arrivals:
the light principals alone (their unloaded wait), everyone under FIFO (every request one
principal: the order before fair queuing), everyone under fair queuing, and everyone with the
light principals always first (the heavy one at a vanishing weight): the least any order of
admission that keeps no slot idle can make them wait while runs are not pre-empted. The last
line is one JSON object for scripts.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import random
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from dispatch_bench import NODE, provider

from edge.dispatch import (
    UNSHARED,
    DispatchError,
    Lease,
    ModelSpec,
    PoolSnapshot,
    ProviderPool,
    Share,
)

PROVIDERS = 2
CAPACITY = 4  # per provider: 8 slots in all
MAX_QUEUE = 32  # per provider
QUEUE_TIMEOUT_S = 30.0
MEAN_TOKENS = 1000  # per request (input + requested output), uniform 200..1800
SERVICE_S_PER_1K_TOKENS = 1.0  # a run's time is proportional to its tokens
LIGHTS = 4
LIGHT_LOAD = 0.16  # each light principal's offered load, as a share of the pool's capacity
HEAVY_RATE_FACTOR = 10  # the heavy principal's request rate, in light principals' rates
WARMUP_SHARE = 0.1  # the first tenth of the timeline is not measured
SETTLE_TURNS = 4  # loop turns after each event: a grant wakes its waiter one turn later


@dataclass(frozen=True)
class Arrival:
    at: float
    principal: str
    tokens: int


@dataclass
class Figures:
    waits_ms: dict[str, list[float]] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    rejected: dict[str, int] = field(default_factory=dict)


def principals() -> list[str]:
    return ["heavy", *(f"light{i}" for i in range(1, LIGHTS + 1))]


def capacity_tokens_per_s() -> float:
    return PROVIDERS * CAPACITY * 1000 / SERVICE_S_PER_1K_TOKENS


def rate_of(principal: str) -> float:
    """Requests per second offered by the principal."""
    light = LIGHT_LOAD * capacity_tokens_per_s() / MEAN_TOKENS
    return light * HEAVY_RATE_FACTOR if principal == "heavy" else light


def arrivals(duration_s: float, seed: int) -> list[Arrival]:
    rng = random.Random(seed)
    out = []
    for principal in principals():
        at = 0.0
        while True:
            at += rng.expovariate(rate_of(principal))
            if at >= duration_s:
                break
            out.append(Arrival(at, principal, rng.randint(200, 2 * MEAN_TOKENS - 200)))
    return sorted(out, key=lambda a: a.at)


def make_pool() -> ProviderPool:
    providers = tuple(
        provider(f"p{i}", CAPACITY, MAX_QUEUE, QUEUE_TIMEOUT_S) for i in range(PROVIDERS)
    )
    model = ModelSpec(id="m", routes={p.id: "served" for p in providers})
    pool = ProviderPool(PoolSnapshot(providers, (model,), 10**9))
    pool.set_node_ready(NODE, True)
    return pool


# The heavy principal's weight in the "lights first" run: its tags outrun any light one's.
VANISHING_WEIGHT = 1e-9


def share_of(arrival: Arrival, order: str) -> Share:
    if order == "fifo":
        return UNSHARED
    weight = VANISHING_WEIGHT if order == "lights-first" and arrival.principal == "heavy" else 1.0
    return Share(arrival.principal, weight=weight, charge=arrival.tokens)


async def simulate(schedule: list[Arrival], order: str, clock: list[float]) -> Figures:
    """Play the arrivals against a fresh pool; ``clock[0]`` is the loop's (virtual) time."""
    pool = make_pool()
    figures = Figures()
    measured_from = schedule[-1].at * WARMUP_SHARE if schedule else 0.0
    events: list[tuple[float, int, Arrival | Lease]] = [
        (a.at, i, a) for i, a in enumerate(schedule)
    ]
    sequence = len(events)
    loop = asyncio.get_running_loop()

    def finished(arrival: Arrival, task: asyncio.Task[Lease]) -> None:
        nonlocal sequence
        measured = arrival.at >= measured_from
        error = task.exception()
        if error is not None:
            assert isinstance(error, DispatchError), error
            if measured:
                figures.rejected[arrival.principal] = figures.rejected.get(arrival.principal, 0) + 1
            return
        lease = task.result()
        if measured:
            figures.waits_ms.setdefault(arrival.principal, []).append(lease.queued_ms)
            figures.tokens[arrival.principal] = (
                figures.tokens.get(arrival.principal, 0) + arrival.tokens
            )
        done_at = clock[0] + arrival.tokens / 1000 * SERVICE_S_PER_1K_TOKENS
        sequence += 1
        heapq.heappush(events, (done_at, sequence, lease))

    heapq.heapify(events)
    while events:
        at, _, event = heapq.heappop(events)
        clock[0] = at
        if isinstance(event, Lease):
            event.release()
        else:
            share = share_of(event, order)
            task = loop.create_task(pool.acquire("m", event.tokens, share=share))
            task.add_done_callback(lambda t, a=event: finished(a, t))
        for _ in range(SETTLE_TURNS):
            await asyncio.sleep(0)
    return figures


def run_virtual(make: Any) -> Figures:
    clock = [0.0]
    loop = asyncio.new_event_loop()
    loop.time = lambda: clock[0]  # type: ignore[method-assign]
    try:
        coroutine: Coroutine[Any, Any, Figures] = make(clock)
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()


def p95(values: list[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def fair_allocation(demands: dict[str, float], capacity: float) -> dict[str, float]:
    """Max-min fair shares (equal weights): its demand, or an equal part of what is left."""
    allocation: dict[str, float] = {}
    left, open_ = capacity, dict(demands)
    while open_:
        part = left / len(open_)
        small = {p: d for p, d in open_.items() if d <= part}
        if not small:
            allocation.update({p: part for p in open_})
            break
        for p, d in small.items():
            allocation[p] = d
            left -= d
            del open_[p]
    return allocation


def jain(figures: Figures, measured_s: float) -> float:
    """Jain's index over each principal's throughput relative to its fair share."""
    demands = {p: rate_of(p) * MEAN_TOKENS for p in principals()}
    shares = fair_allocation(demands, capacity_tokens_per_s())
    xs = [figures.tokens.get(p, 0) / measured_s / shares[p] for p in principals()]
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)) if any(xs) else 0.0


def light_waits(figures: Figures) -> list[float]:
    return [w for p, waits in figures.waits_ms.items() if p != "heavy" for w in waits]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a shorter simulated timeline")
    parser.add_argument("--seed", type=int, default=15)
    args = parser.parse_args()
    duration_s = 600.0 if args.quick else 3600.0
    everyone = arrivals(duration_s, args.seed)
    lights_only = [a for a in everyone if a.principal != "heavy"]
    measured_s = everyone[-1].at * (1 - WARMUP_SHARE)

    unloaded = run_virtual(lambda clock: simulate(lights_only, "fair", clock))
    fifo = run_virtual(lambda clock: simulate(everyone, "fifo", clock))
    fair = run_virtual(lambda clock: simulate(everyone, "fair", clock))
    lights_first = run_virtual(lambda clock: simulate(everyone, "lights-first", clock))

    print(
        f"{PROVIDERS * CAPACITY} slots; heavy offers {rate_of('heavy'):.1f} req/s, each of "
        f"{LIGHTS} light {rate_of('light1'):.2f} req/s ({LIGHT_LOAD:.0%} of capacity); "
        f"{duration_s:.0f} s simulated"
    )
    print(
        f"{'run':<12}{'principal':<10}{'share':>8}{'admitted':>10}{'rejected':>10}{'p95 wait':>12}"
    )
    runs = (("unloaded", unloaded), ("fifo", fifo), ("fair", fair), ("lights-first", lights_first))
    for name, figures in runs:
        total = sum(figures.tokens.values()) or 1
        for p in principals():
            if p not in figures.tokens and p not in figures.rejected:
                continue
            waits = figures.waits_ms.get(p, [])
            print(
                f"{name:<12}{p:<10}{figures.tokens.get(p, 0) / total:>8.1%}{len(waits):>10}"
                f"{figures.rejected.get(p, 0):>10}{p95(waits):>9.0f} ms"
            )
    result = {
        "bench": "fairness",
        "jain_index": round(jain(fair, measured_s), 4),
        "fifo_jain_index": round(jain(fifo, measured_s), 4),
        "light_p95_wait_ms": round(p95(light_waits(fair)), 1),
        "light_unloaded_wait_ms": round(p95(light_waits(unloaded)), 1),
        "fifo_light_p95_wait_ms": round(p95(light_waits(fifo)), 1),
        "lights_first_p95_wait_ms": round(p95(light_waits(lights_first)), 1),
        "light_rejected": sum(n for p, n in fair.rejected.items() if p != "heavy"),
        "fifo_light_rejected": sum(n for p, n in fifo.rejected.items() if p != "heavy"),
        "simulated_s": duration_s,
    }
    print(
        f"light p95 wait: fair {result['light_p95_wait_ms']:.0f} ms, "
        f"unloaded {result['light_unloaded_wait_ms']:.0f} ms, "
        f"fifo {result['fifo_light_p95_wait_ms']:.0f} ms, "
        f"lights always first {result['lights_first_p95_wait_ms']:.0f} ms; "
        f"Jain's index: fair {result['jain_index']:.3f}, fifo {result['fifo_jain_index']:.3f}"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
