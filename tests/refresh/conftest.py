"""Fixtures of the refresh tests: a runtime installed as the process's Edge."""

from __future__ import annotations

import pytest

from edge.config import load_config_text
from edge.mirror import import_config
from edge.operator_api.token import operator_token_digest, read_operator_token
from edge.runtime import get_runtime, install_runtime, runtime_installed
from tests.refresh.refresh_helpers import make_runtime


@pytest.fixture
def runtime(tmp_path):
    """A runtime serving `tmp_path/edge.yaml`, with the mirror imported from it."""
    runtime = make_runtime(tmp_path)
    text = runtime.config_path.read_text()
    import_config(load_config_text(text), text, source="test")
    return runtime


@pytest.fixture
def installed_runtime(runtime, transactional_db):
    """The same runtime, installed as the process's Edge.

    Transactional: the refresh action's database work runs through `database_sync_to_async`,
    which closes connections left inside a transaction (on PostgreSQL, the test's own).
    """
    previous = get_runtime() if runtime_installed() else None
    install_runtime(runtime)
    yield runtime
    install_runtime(previous)


@pytest.fixture
def operator_token(tmp_path, settings):
    """The operator token of this test's Edge, in a token file of its own."""
    settings.IOP_OPERATOR_TOKEN_FILE = tmp_path / "operator-token"
    operator_token_digest(settings.IOP_OPERATOR_TOKEN_FILE)
    return read_operator_token(settings.IOP_OPERATOR_TOKEN_FILE)
