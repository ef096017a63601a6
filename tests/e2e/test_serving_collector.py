"""A serving Edge runs with the collector thresholds of `nodes/wire/collector.py` and says so in
`GET /status` (`gc.thresholds`), beside its collections' pauses."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from nodes.wire.collector import SERVING_THRESHOLDS
from tests.e2e.harness import EdgeProcess, Tokens, echo_config, free_port


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EdgeProcess]:
    edge = EdgeProcess(
        tmp_path_factory.mktemp("collector"), echo_config(Tokens(), free_port(), free_port())
    )
    try:
        yield edge.start()
    finally:
        edge.stop()


def test_the_edge_serves_with_the_serving_thresholds(edge: EdgeProcess) -> None:
    status = httpx.get(f"{edge.operator_url}/status", headers=edge.operator_headers(), timeout=10)

    collector = status.json()["gc"]
    assert collector["thresholds"] == list(SERVING_THRESHOLDS)
    assert collector["frozen_objects"] > 0
    assert [set(generation) for generation in collector["generations"]] == [
        {"collections", "total_ms", "longest_ms"}
    ] * 3
