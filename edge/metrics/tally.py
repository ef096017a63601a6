"""Counters and histograms as plain numbers per label values, turned into Prometheus families
only when scraped.

Every update happens on the Edge's event loop, so none needs a lock: an update is a dictionary
lookup and an addition, several times cheaper than prometheus_client's locked, checked values
(bench/metrics_bench.py). A scrape takes a ``copy`` on the loop and renders it elsewhere.
"""

from __future__ import annotations

import bisect
import itertools
import math

from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

Labels = tuple[str, ...]


class CounterTally:
    """A counter per label values (the family's name without `_total`)."""

    __slots__ = ("documentation", "labels", "name", "values")

    def __init__(self, name: str, documentation: str, labels: Labels) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = labels
        self.values: dict[Labels, float] = {}

    def add(self, labels: Labels, amount: float = 1) -> None:
        self.values[labels] = self.values.get(labels, 0) + amount

    def copy(self) -> CounterTally:
        copied = CounterTally(self.name, self.documentation, self.labels)
        copied.values = dict(self.values)
        return copied

    def family(self) -> CounterMetricFamily:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labels)
        for labels, value in self.values.items():
            family.add_metric(labels, value)
        return family


class HistogramTally:
    """A histogram per label values: a count per bucket (the last one past every bound), then
    the sum of what was observed."""

    __slots__ = ("bounds", "documentation", "labels", "name", "values")

    def __init__(
        self, name: str, documentation: str, labels: Labels, bounds: tuple[float, ...]
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = labels
        self.bounds = bounds
        self.values: dict[Labels, list[float]] = {}

    def observe(self, labels: Labels, value: float) -> None:
        row = self.values.get(labels)
        if row is None:
            row = self.values[labels] = [0.0] * (len(self.bounds) + 2)
        # A bucket counts what is at most its bound (Prometheus' `le`).
        row[bisect.bisect_left(self.bounds, value)] += 1
        row[-1] += value

    def copy(self) -> HistogramTally:
        copied = HistogramTally(self.name, self.documentation, self.labels, self.bounds)
        copied.values = {labels: row.copy() for labels, row in self.values.items()}
        return copied

    def family(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labels)
        edges = [floatToGoString(bound) for bound in (*self.bounds, math.inf)]
        for labels, row in self.values.items():
            cumulative = itertools.accumulate(row[:-1])
            family.add_metric(labels, list(zip(edges, cumulative, strict=True)), row[-1])
        return family
