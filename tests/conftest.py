"""Shared test helpers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import override_settings

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"


@pytest.fixture(scope="session", autouse=True)
def collected_static(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The static files collected once for the session, as `make setup` does (manifest, hashed
    and gzip names): templates render against them in-process, and every Edge a test starts
    serves them (it inherits IOP_STATIC_ROOT)."""
    root = tmp_path_factory.mktemp("static")
    with pytest.MonkeyPatch.context() as patch, override_settings(STATIC_ROOT=root):
        patch.setenv("IOP_STATIC_ROOT", str(root))
        call_command("collectstatic", interactive=False, verbosity=0)
        yield root


@pytest.fixture
def default_config_text() -> str:
    return (CONFIGS / "edge.yaml").read_text()


@pytest.fixture
def pool_config_text() -> str:
    return (CONFIGS / "edge.provider-pool.yaml").read_text()
