"""Prometheus metrics of the Edge: `GET /metrics` on the operator listener.

``METRICS`` is the process's: the request path and refreshes update it on the event loop
(``record_request``, ``count_refresh``). A scrape copies it and reads the pool there too
(``snapshot``; the dashboard's ``edge.dashboard.data.read_pool`` for ``collector.PoolCollector``),
then renders the text elsewhere (``exposition``). Plain Python, no Django.
"""

from __future__ import annotations

from edge.metrics.instruments import EdgeMetrics, exposition

METRICS = EdgeMetrics()

__all__ = ["METRICS", "EdgeMetrics", "exposition"]
