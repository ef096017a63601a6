"""The pool's gauges, read from a real runtime (pool, Node sessions) without a database: they say
what `pool.stats()` and the sessions say, at the moment of the scrape."""

from __future__ import annotations

from typing import Any

from edge.config import load_config_text
from edge.dashboard.data import read_pool
from edge.metrics import exposition
from edge.metrics.collector import PoolCollector
from edge.runtime import EdgeRuntime
from tests.edge.dispatch.pool_helpers import enqueue
from tests.edge.metrics_scrape import Scrape

CONFIG = """
version: 1
edge: {id: edge-m}
openai: {long_context_threshold_tokens: 1000}
nodes:
  - id: node-a
    token_hash_sha256: HASH_A
    adapters: [{id: echo, type: echo}]
    providers:
      - {id: p1, adapter: echo, served_models: [small], capacity: 3, long_context_slots: 1}
      - {id: p2, adapter: echo, served_models: [small], capacity: 2}
  - id: node-b
    token_hash_sha256: HASH_B
    adapters: [{id: echo, type: echo}]
    providers:
      - {id: p3, adapter: echo, served_models: [small], capacity: 1}
models:
  - {id: m, providers: {p1: small, p2: small}}
  - {id: solo, providers: {p3: small}}
""".replace("HASH_A", "a" * 64).replace("HASH_B", "b" * 64)


class SilentLink:
    async def send_frame(self, frame: Any) -> None:
        return None

    async def close_session(self, code: int) -> None:
        return None


async def write_nothing(batch: list[Any]) -> None:
    return None


def make_runtime() -> EdgeRuntime:
    return EdgeRuntime(load_config_text(CONFIG), None, write_nothing, write_nothing)


def scrape(runtime: EdgeRuntime) -> Scrape:
    collector = PoolCollector(read_pool(runtime), runtime.usage.dropped)
    return Scrape(exposition(collector).decode())


async def test_it_shows_in_flight_capacity_and_health_per_provider_as_the_pool_does() -> None:
    runtime = make_runtime()
    session, _ = runtime.nodes.attach("node-a", SilentLink())
    runtime.nodes.mark_ready(session, runtime.config.revision)
    runtime.nodes.attach("node-b", SilentLink())  # connected, not ready yet
    long_lease = await runtime.pool.acquire("m", 5000)
    short_lease = await runtime.pool.acquire("m", 10)
    runtime.pool.set_provider_health("p2", False, "probe failed")

    result = scrape(runtime)
    stats = runtime.pool.stats().providers

    for provider_id, p in stats.items():
        labels = {"provider": provider_id, "node": p.node_id}
        assert result.value("iop_provider_in_flight", **labels) == p.in_flight
        assert result.value("iop_provider_long_in_flight", **labels) == p.long_in_flight
        assert result.value("iop_provider_capacity", **labels) == p.capacity
        assert result.value("iop_provider_healthy", **labels) == p.healthy
        assert result.value("iop_provider_enabled", **labels) == p.enabled
        assert result.value("iop_provider_node_ready", **labels) == p.node_ready
    assert result.total("iop_provider_in_flight") == 2
    assert result.total("iop_provider_long_in_flight") == 1
    assert result.value("iop_provider_healthy", provider="p2", node="node-a") == 0
    assert result.labelled("iop_provider_long_context_slots") == [
        {"provider": "p1", "node": "node-a"}
    ]
    assert result.value("iop_node_sessions", ready="true") == 1
    assert result.value("iop_node_sessions", ready="false") == 1
    assert result.value("iop_nodes_configured") == 2

    long_lease.release()
    short_lease.release()
    assert scrape(runtime).value("iop_provider_in_flight", provider="p1", node="node-a") == 0


async def test_it_shows_the_breaker_state_queues_and_the_running_revision() -> None:
    runtime = make_runtime()
    session, _ = runtime.nodes.attach("node-b", SilentLink())
    runtime.nodes.mark_ready(session, runtime.config.revision)
    lease = await runtime.pool.acquire("solo", 10)
    runtime.pool.report_failure(lease, "upstream_auth_failed", trip=True)
    lease.release()

    result = scrape(runtime)

    states = {
        labels["state"]: result.value("iop_provider_passive_state", **labels)
        for labels in result.labelled("iop_provider_passive_state")
        if labels["provider"] == "p3"
    }
    assert states == {"closed": 0, "open": 1, "half_open": 0}
    assert result.value("iop_provider_healthy", provider="p3", node="node-b") == 0
    for model in ("m", "solo"):
        assert result.value("iop_queue_depth", model=model) == 0
        assert result.value("iop_queue_oldest_wait_seconds", model=model) == 0
    info = {"edge": "edge-m", "revision": runtime.config.revision}
    assert result.value("iop_edge_info", **info) == 1
    assert result.value("iop_usage_dropped_total") == 0


async def test_a_waiting_request_shows_in_its_models_queue() -> None:
    runtime = make_runtime()
    session, _ = runtime.nodes.attach("node-b", SilentLink())
    runtime.nodes.mark_ready(session, runtime.config.revision)
    held = await runtime.pool.acquire("solo", 10)  # p3's only slot
    waiting = await enqueue(runtime.pool, "solo")
    try:
        result = scrape(runtime)

        assert result.value("iop_queue_depth", model="solo") == 1
        assert result.value("iop_queue_long_depth", model="solo") == 0
        oldest = result.value("iop_queue_oldest_wait_seconds", model="solo")
        assert oldest is not None and oldest >= 0
    finally:
        held.release()
        (await waiting).release()
