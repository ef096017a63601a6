"""Real PostgreSQL for the HA tests: Edges of one config sharing the test database.

The tests are marked ``django_db`` so that the PostgreSQL leg of `make test` (``-m django_db``
with ``DATABASE_URL`` set) runs them, on the test database pytest-django creates and migrates;
the SQLite leg collects them too and skips them, so each runs once per `make test`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from django.db import connection

from tests.e2e.harness import EdgeProcess, NodeProcess, free_port, stop_process, wait_until

NEEDS_POSTGRES = (
    "the HA tests need PostgreSQL: they run in the PostgreSQL leg of `make test` "
    "(DATABASE_URL=postgres://…; skipped there with a note when PostgreSQL does not answer)"
)


@pytest.fixture
def pg_url(transactional_db: None) -> str:
    """The URL of the test database (committed writes: the Edges are other processes)."""
    if connection.vendor != "postgresql":
        pytest.skip(NEEDS_POSTGRES)
    db = connection.settings_dict
    user = quote(db["USER"] or "postgres")
    password = f":{quote(db['PASSWORD'])}" if db.get("PASSWORD") else ""
    host = db["HOST"] or "127.0.0.1"
    port = db["PORT"] or 5432
    return f"postgres://{user}{password}@{host}:{port}/{db['NAME']}"


class HAEdge(EdgeProcess):
    """`run_edge --listen --admin-listen` of a shared config, on the shared database."""

    def __init__(self, workdir: Path, config: dict[str, Any], pg_url: str, name: str) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        super().__init__(workdir, config)
        self.name = name
        self.public_port, self.admin_port = free_port(), free_port()
        self.env["DATABASE_URL"] = pg_url

    def migrate(self) -> None:
        """The shared database is migrated once, for the cluster."""

    def run_edge_flags(self) -> list[str]:
        return self.listen_flags()

    def listening(self) -> bool:
        return super().listening() and self.operator_token_file.exists()

    def status(self, timeout: float = 5.0) -> dict[str, Any] | None:
        """`GET /status`, or None when the Edge does not answer (it is down)."""
        try:
            response = httpx.get(
                f"{self.operator_url}/status", headers=self.operator_headers(), timeout=timeout
            )
        except httpx.TransportError:
            return None
        response.raise_for_status()
        return response.json()

    def role(self) -> str | None:
        status = self.status()
        return None if status is None else status["role"]

    def kill(self) -> None:
        """kill -9: no drain, no flush, the socket to the database just closes."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)


class HANode(NodeProcess):
    """A Node agent given every Edge's URL (`--edge` repeated)."""

    def __init__(self, workdir: Path, edges: list[HAEdge], node_id: str, token: str) -> None:
        super().__init__(workdir, edges[0], node_id, token)
        self.args = [sys.executable, "-m", "nodes.agent", "--node-id", node_id]
        for edge in edges:
            self.args += ["--edge", edge.ws_url]


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[list[EdgeProcess | NodeProcess]]:
    """Processes a test starts, stopped when it ends (before the test database is flushed);
    their logs' tails are printed when the test failed."""
    started: list[EdgeProcess | NodeProcess] = []
    yield started
    for process in reversed(started):
        stop_process(process.process)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    started = item.funcargs.get("processes") if hasattr(item, "funcargs") else None
    if report.failed and started:
        for process in started:
            lines = process.log().splitlines()[-120:]
            report.sections.append((f"log {process.log_path.name}", "\n".join(lines)))
    return report


@pytest.fixture
def ha_edge(
    tmp_path: Path, pg_url: str, processes: list[Any]
) -> Callable[[dict[str, Any]], HAEdge]:
    """``ha_edge(config)`` starts one more Edge of ``config`` (its own workdir and copy of the
    file, its own ports): `edge-a`, `edge-b`, …"""

    def start(config: dict[str, Any]) -> HAEdge:
        name = f"edge-{'abcdefgh'[sum(isinstance(p, HAEdge) for p in processes)]}"
        edge = HAEdge(tmp_path / name, config, pg_url, name)
        processes.append(edge)
        return edge.start()

    return start


def wait_for_leader(edges: list[HAEdge], timeout: float = 30.0) -> HAEdge:
    """The Edge whose /status says leader once only one does. (Whether two ever led at once is
    for a LeaderWatch to tell: two answers in a row are not one moment.)"""

    def found() -> HAEdge | None:
        leaders = [edge for edge in edges if edge.role() == "leader"]
        return leaders[0] if len(leaders) == 1 else None

    return wait_until(found, timeout=timeout, what="one Edge to lead")
