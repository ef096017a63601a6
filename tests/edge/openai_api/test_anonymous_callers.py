"""`openai.require_auth: false`: callers without a known token are served, and metered as such."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from edge.config import load_config_text
from edge.runtime import EdgeRuntime, install_runtime
from edge.startup import start_runtime
from edge.tokens import sha256_hex
from edge.usage import Usage
from nodes.ack_log import RevisionAcks
from tests.edge.openai_api.asgi_client import post_chat

KNOWN_TOKEN = "iop_known-token"
WRONG_TOKEN = "iop_wrong-token-planted"


def config_text(require_auth: bool) -> str:
    return f"""
version: 1
edge: {{id: e}}
openai:
  require_auth: {str(require_auth).lower()}
  principal_tokens:
    - {{token_ref: t1, token_hash_sha256: "{sha256_hex(KNOWN_TOKEN)}", principal_ref: team-a}}
nodes:
  - id: node-a
    token_hash_sha256: "{sha256_hex("a")}"
    adapters: [{{id: echo, type: echo}}]
    providers: [{{id: pa, adapter: echo, served_models: [s], capacity: 1}}]
models:
  - {{id: m, providers: {{pa: s}}}}
"""


class Recorded:
    def __init__(self) -> None:
        self.rows: list[Usage] = []

    async def __call__(self, batch: list[Usage]) -> None:
        self.rows.extend(batch)


async def write_no_acks(batch: list[RevisionAcks]) -> None:
    return None


@pytest.fixture
def recorded() -> Recorded:
    return Recorded()


@pytest.fixture
def runtime(recorded: Recorded):
    config = load_config_text(config_text(require_auth=False))
    runtime = EdgeRuntime(config, None, recorded, write_no_acks)
    install_runtime(runtime)
    yield runtime
    install_runtime(None)


async def metered_as(runtime: EdgeRuntime, recorded: Recorded, token: str | None) -> Usage:
    # An unknown model is answered without a Node, and metered all the same.
    body = json.dumps({"model": "unknown", "messages": [{"role": "user", "content": "x"}]})
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    status, _, _ = await post_chat(body.encode(), headers)
    assert status == 404
    await runtime.usage.flush()
    (row,) = recorded.rows
    return row


@pytest.mark.parametrize(
    ("token", "principal_ref", "token_ref"),
    [
        (None, "(anonymous)", ""),
        (WRONG_TOKEN, "(unknown token)", ""),
        (KNOWN_TOKEN, "team-a", "t1"),
    ],
)
async def test_usage_tells_anonymous_and_wrong_token_callers_apart(
    runtime, recorded, token, principal_ref, token_ref
) -> None:
    row = await metered_as(runtime, recorded, token)

    assert (row.principal_ref, row.token_ref) == (principal_ref, token_ref)
    assert WRONG_TOKEN not in repr(row)


@pytest.mark.django_db  # the start reads the month's usage for the budgets
def test_starting_without_required_auth_warns(caplog, tmp_path: Path) -> None:
    with caplog.at_level(logging.WARNING, logger="edge.startup"):
        start_runtime(load_config_text(config_text(require_auth=False)), tmp_path / "e.yaml")
    install_runtime(None)

    assert "openai.require_auth is false" in caplog.text


@pytest.mark.django_db  # the start reads the month's usage for the budgets
def test_starting_with_required_auth_does_not_warn(caplog, tmp_path: Path) -> None:
    with caplog.at_level(logging.WARNING, logger="edge.startup"):
        start_runtime(load_config_text(config_text(require_auth=True)), tmp_path / "e.yaml")
    install_runtime(None)

    assert "require_auth" not in caplog.text
