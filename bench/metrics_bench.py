"""What the Prometheus metrics cost: per request on the event loop, and per scrape.

Run: ``.venv/bin/python bench/metrics_bench.py [--quick]``. Prints a table; the last line is one
JSON object for scripts. ``record_request`` is what each metered request adds to the request path
(a streamed answer with tokens: every instrument it touches), spread over a realistic number of
label sets; a scrape copies those metrics and reads the pool of a fleet config (on the loop), then
renders the text (in the operator view's thread). Each figure is the best of several rounds,
which filters out scheduler noise on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from fleet_config import fleet_yaml
from prometheus_client import CollectorRegistry, Counter, Histogram

from edge.config import load_config_text
from edge.dashboard.data import read_pool
from edge.metrics import EdgeMetrics, exposition
from edge.metrics.collector import PoolCollector
from edge.metrics.instruments import DURATION_BUCKETS, FIRST_TOKEN_BUCKETS, QUEUE_BUCKETS
from edge.runtime import EdgeRuntime
from edge.usage import Usage

MODELS, PROVIDERS, TOKENS = 8, 16, 32  # label sets a busy Edge's requests spread over


def usages(models: list[str]) -> list[Usage]:
    """A finished streamed request per label set, over ``models``' first MODELS."""
    return [
        Usage(
            request_id=f"r{i}",
            model=models[i % MODELS],
            status="ok",
            principal_ref=f"team-{i % TOKENS // 4}",
            token_ref=f"app-{i % TOKENS}",
            provider=f"p{i % PROVIDERS}",
            prompt_tokens=120,
            completion_tokens=300,
            queue_ms=0.4,
            total_ms=850.0,
            attempts=1,
        )
        for i in range(MODELS * PROVIDERS * TOKENS)
    ]


class ClientLibraryMetrics:
    """The same updates with prometheus_client's own Counter and Histogram, for comparison:
    what ``EdgeMetrics`` would cost per request had it used them."""

    def __init__(self) -> None:
        registry = CollectorRegistry()
        timing = ("model", "provider")
        self.requests = Counter("r", "", ("model", "provider", "status"), registry=registry)
        self.duration = Histogram("d", "", timing, buckets=DURATION_BUCKETS, registry=registry)
        self.first = Histogram("f", "", timing, buckets=FIRST_TOKEN_BUCKETS, registry=registry)
        self.queue = Histogram("q", "", timing, buckets=QUEUE_BUCKETS, registry=registry)
        self.tokens = Counter("t", "", ("principal", "token", "model", "kind"), registry=registry)

    def record_request(self, usage: Usage, first_token_s: float, configured: set[str]) -> None:
        model = usage.model if usage.model in configured else "(unknown model)"
        provider = usage.provider or "(none)"
        self.requests.labels(model, provider, usage.status).inc()
        self.duration.labels(model, provider).observe(usage.total_ms / 1000)
        self.first.labels(model, provider).observe(first_token_s)
        self.queue.labels(model, provider).observe(usage.queue_ms / 1000)
        principal, token = usage.principal_ref, usage.token_ref
        self.tokens.labels(principal, token, model, "prompt").inc(usage.prompt_tokens)
        self.tokens.labels(principal, token, model, "completion").inc(usage.completion_tokens)


def record_ns(metrics: EdgeMetrics | ClientLibraryMetrics, requests: int, rounds: int) -> float:
    configured = {f"m{i}" for i in range(MODELS)}
    batch = usages(sorted(configured))
    for usage in batch:  # every label set exists, as it soon does on a running Edge
        metrics.record_request(usage, 0.12, configured)
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter_ns()
        for i in range(requests):
            metrics.record_request(batch[i % len(batch)], 0.12, configured)
        best = min(best, (time.perf_counter_ns() - started) / requests)
    return best


async def scrape_ms(nodes: int, rounds: int) -> tuple[float, float, int]:
    """(reading the pool on the loop, rendering the text) in ms, and the text's size."""

    async def discard(batch: list[Any]) -> None:
        return None

    runtime = EdgeRuntime(load_config_text(fleet_yaml(nodes)), None, discard, discard)
    metrics = EdgeMetrics()
    for usage in usages(sorted(runtime.models)):  # the label sets of record_ns
        metrics.record_request(usage, 0.12, runtime.models)
    read_best = render_best = float("inf")
    size = 0
    for _ in range(rounds):
        started = time.perf_counter()
        collectors = metrics.snapshot(), PoolCollector(read_pool(runtime), runtime.usage.dropped)
        read = time.perf_counter()
        text = exposition(*collectors)
        done = time.perf_counter()
        read_best = min(read_best, (read - started) * 1000)
        render_best = min(render_best, (done - read) * 1000)
        size = len(text)
    return read_best, render_best, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (make bench)")
    args = parser.parse_args()
    requests, rounds, nodes = (20_000, 3, 20) if args.quick else (200_000, 5, 100)

    per_request = record_ns(EdgeMetrics(), requests, rounds)
    client_library = record_ns(ClientLibraryMetrics(), requests, rounds)
    read, render, size = asyncio.run(scrape_ms(nodes, rounds))
    providers = nodes * 10
    print(f"record_request: {per_request:,.0f} ns per request")
    print(f"the same with prometheus_client's Counter and Histogram: {client_library:,.0f} ns")
    print(f"scrape, {providers} providers: read {read:.2f} ms on the loop, render {render:.1f} ms")
    print(f"scrape size: {size / 1024:,.0f} KiB")
    print(
        json.dumps(
            {
                "bench": "metrics",
                "record_request_ns": round(per_request),
                "prometheus_client_ns": round(client_library),
                "scrape_providers": providers,
                "scrape_read_ms": round(read, 3),
                "scrape_render_ms": round(render, 2),
                "scrape_bytes": size,
            }
        )
    )


if __name__ == "__main__":
    main()
