"""Shared test helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"


@pytest.fixture
def default_config_text() -> str:
    return (CONFIGS / "edge.yaml").read_text()


@pytest.fixture
def pool_config_text() -> str:
    return (CONFIGS / "edge.provider-pool.yaml").read_text()
