"""`GET /metrics` on the operator listener: Prometheus' text format, behind the operator token.

The guards are every operator view's (loopback, same site, the token: a scraper sends it with
`authorization` in its scrape config); their refusals stay JSON. The answer itself is text.
"""

from __future__ import annotations

from asgiref.sync import async_to_sync
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request

from edge.dashboard.data import read_pool
from edge.metrics import METRICS, exposition
from edge.metrics.collector import PoolCollector
from edge.metrics.instruments import MetricsSnapshot
from edge.operator_api.base import OperatorAPIView
from edge.operator_api.schema import described
from edge.runtime import get_runtime


async def _read_metrics() -> tuple[MetricsSnapshot, PoolCollector]:
    # On the event loop that updates the metrics and owns the pool (DRF views run in a worker
    # thread): copies, so that rendering them there races with nothing.
    runtime = get_runtime()
    collector = PoolCollector(
        read_pool(runtime), runtime.usage.dropped, leader=runtime.leadership.admitting
    )
    return METRICS.snapshot(), collector


class TextOrJSONErrors(BaseContentNegotiation):
    """Whatever ``Accept`` says (a scraper may name only the Prometheus and OpenMetrics types),
    the answer is the text and a refusal is JSON: the view's one renderer renders refusals only."""

    def select_parser(self, request: Request, parsers: list[BaseParser]) -> BaseParser:
        return parsers[0]

    def select_renderer(
        self, request: Request, renderers: list[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        return renderers[0], renderers[0].media_type


class MetricsView(OperatorAPIView):
    """Counters, histograms and the pool's gauges in Prometheus' text format (version 0.0.4),
    for the operator token; refusals are JSON like every operator view's."""

    content_negotiation_class = TextOrJSONErrors

    @described(
        summary="Prometheus metrics",
        responses={
            (200, "text/plain"): OpenApiResponse(
                OpenApiTypes.STR, description="Text exposition format 0.0.4"
            )
        },
    )
    def get(self, request: Request) -> HttpResponse:
        # Read on the loop, rendered here: a large pool's text is built off the loop.
        body = exposition(*async_to_sync(_read_metrics)())
        return HttpResponse(body, content_type=CONTENT_TYPE_PLAIN_0_0_4)
