"""A single Edge (no `edge.ha`) always leads: `GET /health/leader` says so to a load balancer,
`GET /status` has `"role": "leader"` and `"ha": null`, `/metrics` has `iop_edge_leader 1`; and
`run_edge --listen/--admin-listen` serve on the ports given, not the config's."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from edge.ports import port_open
from tests.e2e.harness import ROOT, EdgeProcess, Tokens, echo_config, free_port, wait_until


class FlaggedEdge(EdgeProcess):
    """An Edge started with `--listen` and `--admin-listen` over its config's listeners."""

    def __init__(self, workdir: Path, tokens: Tokens) -> None:
        self.config_ports = (free_port(), free_port())
        super().__init__(workdir, echo_config(tokens, *self.config_ports))
        self.public_port, self.admin_port = free_port(), free_port()

    def start(self) -> FlaggedEdge:
        self.var_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=self.env, check=True
        )
        self.process = subprocess.Popen(
            [
                *(sys.executable, "manage.py", "run_edge", "--config", str(self.config_path)),
                *("--listen", f"127.0.0.1:{self.public_port}"),
                *("--admin-listen", f"127.0.0.1:{self.admin_port}"),
            ],
            cwd=ROOT,
            env=self.env,
            stdout=self.log_path.open("ab"),
            stderr=subprocess.STDOUT,
        )
        wait_until(
            lambda: self.process.poll() is not None
            or (
                port_open("127.0.0.1", self.public_port) and port_open("127.0.0.1", self.admin_port)
            ),
            timeout=30,
            what="the Edge to listen",
        )
        assert self.process.poll() is None, self.log()
        return self


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
