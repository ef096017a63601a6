"""A single Edge (no `edge.ha`) always leads: `GET /health/leader` says so to a load balancer,
`GET /status` has `"role": "leader"` and `"ha": null`, `/metrics` has `iop_edge_leader 1`; and
`run_edge --listen/--admin-listen` serve on the ports given, not the config's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from edge.ports import port_open
from tests.e2e.harness import EdgeProcess, Tokens, echo_config, free_port


class FlaggedEdge(EdgeProcess):
    """An Edge started with `--listen` and `--admin-listen` over its config's listeners."""

    def __init__(self, workdir: Path, tokens: Tokens) -> None:
        self.config_ports = (free_port(), free_port())
        super().__init__(workdir, echo_config(tokens, *self.config_ports))
        self.public_port, self.admin_port = free_port(), free_port()

    def run_edge_flags(self) -> list[str]:
        return self.listen_flags()


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlaggedEdge]:
    edge = FlaggedEdge(tmp_path_factory.mktemp("flagged"), Tokens())
    try:
        yield edge.start()
    finally:
        edge.stop()


def test_it_serves_on_the_flags_listeners_only(edge: FlaggedEdge) -> None:
    assert not any(port_open("127.0.0.1", port) for port in edge.config_ports)
    assert httpx.get(f"{edge.base_url}/v1/models", timeout=10).status_code == 401
    status = httpx.get(f"{edge.operator_url}/status", headers=edge.operator_headers(), timeout=10)
    assert status.status_code == 200
    # The public listener is the flag's: the operator API is not served there.
    assert httpx.get(f"{edge.base_url}/status", timeout=10).status_code == 404
    assert f"public   http://127.0.0.1:{edge.public_port}/" in edge.log()


def test_a_single_edge_says_it_leads_everywhere(edge: FlaggedEdge) -> None:
    health = httpx.get(f"{edge.base_url}/health/leader", timeout=10)
    status = httpx.get(
        f"{edge.operator_url}/status", headers=edge.operator_headers(), timeout=10
    ).json()
    metrics = httpx.get(
        f"{edge.operator_url}/metrics", headers=edge.operator_headers(), timeout=10
    ).text

    assert (health.status_code, health.json()) == (200, {"role": "leader"})
    assert health.headers["cache-control"] == "no-store"
    assert (status["role"], status["ha"]) == ("leader", None)
    assert 'iop_edge_leader{edge_id="edge-test"} 1.0' in metrics.splitlines()


def test_the_health_path_is_a_get_on_the_public_listener(edge: FlaggedEdge) -> None:
    head = httpx.head(f"{edge.base_url}/health/leader", timeout=10)
    post = httpx.post(f"{edge.base_url}/health/leader", timeout=10)
    on_operator = httpx.get(f"{edge.operator_url}/health/leader", timeout=10)

    assert (head.status_code, head.content) == (200, b"")
    assert post.status_code == 405
    assert post.headers["allow"] == "GET, HEAD"
    assert on_operator.status_code == 404  # not served there
