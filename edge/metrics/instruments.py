"""The Edge's counters and histograms, and the text a scrape gets (docs/operations.md, "Metrics").

Updated once per request, where its usage row is recorded (so every path counts once), and once
per refresh, both on the event loop. One ``EdgeMetrics`` per process (``edge.metrics.METRICS``);
a test builds its own, and each scrape renders into a registry of its own, never
prometheus_client's global one.
"""

from __future__ import annotations

from collections.abc import Container, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from edge.metrics.labels import model_label, ref_label, status_label
from edge.metrics.tally import CounterTally, HistogramTally
from edge.usage import Usage

TIMING_LABELS = ("model", "provider")
# Seconds. Queue waits end at `queue_timeout_s`; runs at IOP_RUN_TIMEOUT_S (600 s by default).
FIRST_TOKEN_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
QUEUE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class EdgeMetrics:
    """What one Edge counts. Update and ``snapshot`` on the event loop."""

    def __init__(self) -> None:
        self.requests = CounterTally(
            "iop_requests",
            "Metered requests (those that named a model), by the status the caller saw.",
            ("model", "provider", "status"),
        )
        self.duration = HistogramTally(
            "iop_request_duration_seconds",
            "From the request's arrival to its last byte, whatever its status.",
            TIMING_LABELS,
            DURATION_BUCKETS,
        )
        self.first_token = HistogramTally(
            "iop_time_to_first_token_seconds",
            "Streamed requests: from the request's arrival to its first chunk sent.",
            TIMING_LABELS,
            FIRST_TOKEN_BUCKETS,
        )
        self.queue_wait = HistogramTally(
            "iop_queue_wait_seconds",
            "Requests that got a provider: how long they waited for its slot.",
            TIMING_LABELS,
            QUEUE_BUCKETS,
        )
        self.tokens = CounterTally(
            "iop_tokens",
            "Tokens the upstreams reported, by kind (prompt, completion).",
            ("principal_ref", "token_ref", "model", "kind"),
        )
        self.refreshes = CounterTally(
            "iop_refreshes",
            "Refreshes (dry runs and applies), by their outcome.",
            ("mode", "status"),
        )

    def record_request(
        self, usage: Usage, first_token_s: float | None, configured_models: Container[str]
    ) -> None:
        """One finished request, as metered. ``first_token_s``: a stream's time to its first
        chunk (None when nothing was streamed)."""
        model = model_label(usage.model, configured_models)
        provider = ref_label(usage.provider)
        timing = (model, provider)
        self.requests.add((model, provider, status_label(usage.status)))
        self.duration.observe(timing, usage.total_ms / 1000)
        if first_token_s is not None:
            self.first_token.observe(timing, first_token_s)
        if usage.attempts:
            self.queue_wait.observe(timing, usage.queue_ms / 1000)
        if usage.prompt_tokens or usage.completion_tokens:
            principal, token = ref_label(usage.principal_ref), ref_label(usage.token_ref)
            self.tokens.add((principal, token, model, "prompt"), usage.prompt_tokens)
            self.tokens.add((principal, token, model, "completion"), usage.completion_tokens)

    def count_refresh(self, mode: str, status: str) -> None:
        self.refreshes.add((mode, status))

    def snapshot(self) -> MetricsSnapshot:
        """A copy to render anywhere (a scrape's worker thread)."""
        return MetricsSnapshot(
            (self.requests.copy(), self.tokens.copy(), self.refreshes.copy()),
            (self.duration.copy(), self.first_token.copy(), self.queue_wait.copy()),
        )


class MetricsSnapshot(Collector):
    """An ``EdgeMetrics`` as it was at one scrape, as Prometheus families."""

    def __init__(
        self, counters: tuple[CounterTally, ...], histograms: tuple[HistogramTally, ...]
    ) -> None:
        self._counters = counters
        self._histograms = histograms

    def collect(self) -> Iterator[Metric]:
        for counter in self._counters:
            yield counter.family()
        for histogram in self._histograms:
            yield histogram.family()


def exposition(*collectors: Collector) -> bytes:
    """Prometheus' text format (version 0.0.4) of what ``collectors`` collect."""
    registry = CollectorRegistry()
    for collector in collectors:
        registry.register(collector)
    return generate_latest(registry)
