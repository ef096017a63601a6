"""The real-process fixtures of tests/e2e (Edges, Nodes, tokens), for the benchmark tools' tests."""

from __future__ import annotations

from tests.e2e.conftest import (  # noqa: F401  (fixtures and the log-tail hook, by import)
    edge_factory,
    pytest_runtest_makereport,
    tokens,
)
