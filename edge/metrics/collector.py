"""Gauges of the pool, made at scrape time from one reading of it (the dashboard's
``edge.dashboard.data.read_pool``): the request path keeps no gauge up to date, so it pays
nothing for them."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from edge.dashboard.data import PoolReading
from edge.dispatch.passive import CLOSED, HALF_OPEN, OPEN

PROVIDER_LABELS = ("provider", "node")
PASSIVE_STATES = (CLOSED, OPEN, HALF_OPEN)


class PoolCollector(Collector):
    """The pool's state as Prometheus families; a provider's node is a label beside its id."""

    def __init__(self, reading: PoolReading, usage_dropped: int, *, leader: bool = True) -> None:
        self._reading = reading
        self._usage_dropped = usage_dropped
        self._leader = leader

    def collect(self) -> Iterator[Metric]:
        config = self._reading.config
        yield InfoMetricFamily(
            "iop_edge",
            "The Edge and the config revision it runs.",
            value={"edge": config.edge.id, "revision": config.revision},
        )
        leader = GaugeMetricFamily(
            "iop_edge_leader",
            "1 when this Edge leads (serves the pool), 0 when it is a standby (edge.ha).",
            labels=("edge_id",),
        )
        leader.add_metric([config.edge.id], 1 if self._leader else 0)
        yield leader
        yield from self._providers()
        yield from self._queues()
        yield from self._nodes()
        yield from self._principals()
        yield CounterMetricFamily(
            "iop_usage_dropped",
            "Usage rows dropped because the database fell too far behind.",
            value=self._usage_dropped,
        )

    def _providers(self) -> Iterator[Metric]:
        def family(name: str, documentation: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, documentation, labels=PROVIDER_LABELS)

        in_flight = family("iop_provider_in_flight", "Runs in flight on the provider.")
        long_in_flight = family(
            "iop_provider_long_in_flight", "Long-context runs in flight on the provider."
        )
        capacity = family("iop_provider_capacity", "Runs the provider takes at once.")
        long_slots = family(
            "iop_provider_long_context_slots",
            "Long-context runs the provider takes at once (providers that set a limit).",
        )
        healthy = family(
            "iop_provider_healthy",
            "1 when its Node reports it healthy and passive health has not taken it out.",
        )
        enabled = family("iop_provider_enabled", "1 when the config enables the provider.")
        node_ready = family("iop_provider_node_ready", "1 when the provider's Node is ready.")
        passive = GaugeMetricFamily(
            "iop_provider_passive_state",
            "Passive health: 1 for the state the provider's breaker is in.",
            labels=(*PROVIDER_LABELS, "state"),
        )
        for p in self._reading.stats.providers.values():
            labels = [p.provider_id, p.node_id]
            in_flight.add_metric(labels, p.in_flight)
            long_in_flight.add_metric(labels, p.long_in_flight)
            capacity.add_metric(labels, p.capacity)
            if p.long_context_slots is not None:
                long_slots.add_metric(labels, p.long_context_slots)
            healthy.add_metric(labels, p.healthy)
            enabled.add_metric(labels, p.enabled)
            node_ready.add_metric(labels, p.node_ready)
            for breaker in PASSIVE_STATES:
                passive.add_metric([*labels, breaker], p.passive_state == breaker)
        yield from (in_flight, long_in_flight, capacity, long_slots, healthy, enabled)
        yield from (node_ready, passive)

    def _queues(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily(
            "iop_queue_depth", "Requests waiting for a slot.", labels=("model",)
        )
        long_depth = GaugeMetricFamily(
            "iop_queue_long_depth",
            "Long-context requests among those waiting.",
            labels=("model",),
        )
        oldest = GaugeMetricFamily(
            "iop_queue_oldest_wait_seconds",
            "How long the oldest waiting request has waited (0 when none waits).",
            labels=("model",),
        )
        for m in self._reading.stats.models.values():
            depth.add_metric([m.model_id], m.queue_depth)
            long_depth.add_metric([m.model_id], m.long_queue_depth)
            oldest.add_metric([m.model_id], m.oldest_wait_s)
        yield from (depth, long_depth, oldest)

    def _nodes(self) -> Iterator[Metric]:
        sessions = GaugeMetricFamily(
            "iop_node_sessions",
            "Connected Node sessions, ready (serving) or not yet.",
            labels=("ready",),
        )
        facts = self._reading.sessions.values()
        ready = sum(session.ready for session in facts)
        sessions.add_metric(["true"], ready)
        sessions.add_metric(["false"], len(facts) - ready)
        yield sessions
        yield GaugeMetricFamily(
            "iop_nodes_configured",
            "Nodes the running config lists.",
            value=len(self._reading.config.nodes),
        )

    def _principals(self) -> Iterator[Metric]:
        """Per principal (docs/governance.md); the anonymous caller's label is empty."""
        labels = ("principal",)
        in_flight = GaugeMetricFamily(
            "iop_principal_in_flight",
            "Requests of the principal admitted and not ended.",
            labels=labels,
        )
        queued = GaugeMetricFamily(
            "iop_principal_queued", "Requests of the principal waiting for a slot.", labels=labels
        )
        admitted = CounterMetricFamily(
            "iop_principal_admitted",
            "Requests its limits admitted since the Edge started.",
            labels=labels,
        )
        limited = CounterMetricFamily(
            "iop_principal_limited",
            "Requests refused with 429 by its limits or budgets since the Edge started.",
            labels=labels,
        )
        remaining = GaugeMetricFamily(
            "iop_principal_budget_remaining_tokens",
            "Tokens left of the principal's own budget (principals whose policy sets one).",
            labels=(*labels, "period"),
        )
        for row in self._reading.principals:
            name = [row.principal]
            in_flight.add_metric(name, row.in_flight)
            queued.add_metric(name, row.queued)
            admitted.add_metric(name, row.admitted)
            limited.add_metric(name, row.limited)
            for period, left in (
                ("day", row.tokens_per_day_remaining),
                ("month", row.tokens_per_month_remaining),
            ):
                if left is not None:
                    remaining.add_metric([*name, period], left)
        yield from (in_flight, queued, admitted, limited, remaining)
