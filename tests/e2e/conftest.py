"""Fixtures for the real-process tests: Edges and Nodes as subprocesses, always stopped.

`edge_factory` and `node_factory` are module-scoped, so a test module starts its Edge once. Every
process they start is stopped when the module ends, even when a start fails. When a test fails, the
tail of the log of each process still running is attached to the failure report.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.harness import (
    ROOT,
    EdgeProcess,
    NodeProcess,
    Tokens,
    free_port,
    stop_process,
    wait_until,
)

LOG_TAIL_LINES = 150

# Processes started by the factories and not yet stopped, for the failure report.
_live_processes: list[EdgeProcess | NodeProcess | ScriptedUpstream] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed:
        for process in _live_processes:
            lines = process.log().splitlines()[-LOG_TAIL_LINES:]
            name = f"{process.log_path.parent.name}/{process.log_path.name}"
            report.sections.append((f"log {name} (last {len(lines)} lines)", "\n".join(lines)))
    return report


@pytest.fixture(scope="module")
def tokens() -> Tokens:
    """Raw node and client tokens for one module; configs only get their hashes."""
    return Tokens()


@pytest.fixture(scope="module")
def edge_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., EdgeProcess]]:
    """``edge_factory(config, name="edge")`` starts a `run_edge` subprocess in its own workdir."""
    started: list[EdgeProcess] = []

    def start(config: dict[str, Any], name: str = "edge") -> EdgeProcess:
        edge = EdgeProcess(tmp_path_factory.mktemp(name), config)
        started.append(edge)
        _live_processes.append(edge)
        return edge.start()

    yield start
    for edge in reversed(started):
        edge.stop()
        _live_processes.remove(edge)


@pytest.fixture(scope="module")
def node_factory(
    edge_factory: Callable[..., EdgeProcess], tokens: Tokens
) -> Iterator[Callable[..., NodeProcess]]:
    """``node_factory(edge, node_id, token=None, env=None)`` starts a Node agent subprocess.

    The token defaults to ``tokens.node(node_id)``. Nodes stop before their Edge does.
    """
    started: list[NodeProcess] = []

    def start(
        edge: EdgeProcess,
        node_id: str,
        token: str | None = None,
        env: dict[str, str] | None = None,
    ) -> NodeProcess:
        node = NodeProcess(edge.workdir, edge, node_id, token or tokens.node(node_id))
        node.env.update(env or {})
        started.append(node)
        _live_processes.append(node)
        return node.start()

    yield start
    for node in reversed(started):
        node.stop()
        _live_processes.remove(node)


# -- The scripted upstream (tests/e2e/upstream_server.py) ---------------------------------------


class ScriptedUpstream:
    """A `tests.e2e.upstream_server` process; the served model name picks its behaviour."""

    def __init__(self, workdir: Path, *, models: bool = True) -> None:
        self.port = free_port()
        self.log_path = workdir / f"upstream-{self.port}.log"
        self.args = [sys.executable, "-m", "tests.e2e.upstream_server", "--port", str(self.port)]
        if not models:
            self.args.append("--no-models")
        self.process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def _control_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ScriptedUpstream:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
            )

        def answering() -> bool:
            assert self.process is not None and self.process.poll() is None, self.log()
            try:
                return httpx.get(f"{self._control_url}/_requests", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(answering, timeout=20, what="the scripted upstream to answer")
        return self

    def requests(self) -> list[dict[str, Any]]:
        """The requests received so far: ``{"path", "model", "body"}``, long strings cut short."""
        response = httpx.get(f"{self._control_url}/_requests", timeout=10)
        response.raise_for_status()
        return response.json()

    def clear(self) -> None:
        httpx.post(f"{self._control_url}/_clear", timeout=10).raise_for_status()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        stop_process(self.process)


@pytest.fixture(scope="module")
def scripted_upstream_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., ScriptedUpstream]]:
    """``scripted_upstream_factory(models=True)`` starts a scripted upstream for the module;
    ``models=False`` makes its `GET /v1/models` answer 404."""
    started: list[ScriptedUpstream] = []

    def start(*, models: bool = True) -> ScriptedUpstream:
        upstream = ScriptedUpstream(tmp_path_factory.mktemp("upstream"), models=models)
        started.append(upstream)
        _live_processes.append(upstream)
        return upstream.start()

    yield start
    for upstream in started:
        upstream.stop()
        _live_processes.remove(upstream)


@pytest.fixture(scope="module")
def scripted_upstream(
    scripted_upstream_factory: Callable[..., ScriptedUpstream],
) -> ScriptedUpstream:
    """One scripted upstream for the module (`.base_url`, `.requests()`, `.clear()`)."""
    return scripted_upstream_factory()


# -- OpenAI API tests (test_openai_*.py) ---------------------------------------------------------


class OpenAIStack:
    """One Edge with its own environment, its Node agents and SDK clients (the OpenAI API tests)."""

    def __init__(self, edge: EdgeProcess, tokens: Tokens, register: Callable[[Any], None]) -> None:
        self.edge = edge
        self.tokens = tokens
        self.nodes: dict[str, NodeProcess] = {}
        self._register = register

    @property
    def status_url(self) -> str:
        return f"{self.edge.operator_url}/status"

    def status(self) -> dict[str, Any]:
        """`GET /status` on the operator listener."""
        response = httpx.get(self.status_url, headers=self.edge.operator_headers(), timeout=10)
        response.raise_for_status()
        return response.json()

    def start_node(
        self,
        node_id: str,
        *,
        token: str | None = None,
        args: tuple[str, ...] = (),
        wait_ready: bool = True,
        log_name: str | None = None,
    ) -> NodeProcess:
        """Start a Node agent (``args`` add to its command line); ``stack.nodes`` keys it by
        ``log_name`` when given (its log file in the Edge's workdir), else by ``node_id``."""
        node = NodeProcess(
            self.edge.workdir, self.edge, node_id, token or self.tokens.node(node_id)
        )
        node.args += list(args)
        if log_name:
            node.log_path = self.edge.workdir / log_name
        self._register(node)
        node.start()
        self.nodes[log_name or node_id] = node
        if wait_ready:
            self.wait_ready(node_id)
        return node

    def wait_ready(self, node_id: str, ready: bool = True) -> None:
        wait_until(
            lambda: bool(self.status()["nodes"].get(node_id, {}).get("ready")) == ready,
            timeout=20,
            what=f"node {node_id} ready={ready}",
        )

    def in_flight(self, provider_id: str) -> int:
        return self.status()["providers"][provider_id]["in_flight"]

    def wait_idle(self, *provider_ids: str) -> None:
        """Every listed provider has no run in flight (e.g. after closing held streams)."""
        wait_until(
            lambda: all(self.in_flight(p) == 0 for p in provider_ids),
            timeout=20,
            what=f"{', '.join(provider_ids)} idle",
        )

    def client(self, token_ref: str = "app-1", *, api_key: str | None = None) -> openai.OpenAI:
        """An SDK client with no retries, for a principal token (or any raw ``api_key``)."""
        client = openai.OpenAI(
            base_url=f"{self.edge.openai_url}/v1",
            api_key=api_key if api_key is not None else self.tokens.client(token_ref),
            max_retries=0,
            timeout=30,
        )
        self._register(client)
        return client

    def usage_rows(self, **where: Any) -> list[dict[str, Any]]:
        """Rows of the Edge's `edge_usagerecord` table matching ``where`` (column = value)."""
        sql = "SELECT * FROM edge_usagerecord"
        if where:
            sql += " WHERE " + " AND ".join(f"{column} = ?" for column in where)
        connection = self.edge.db()
        connection.row_factory = sqlite3.Row
        try:
            return [
                dict(row) for row in connection.execute(sql + " ORDER BY id", tuple(where.values()))
            ]
        finally:
            connection.close()

    def wait_usage(self, count: int = 1, **where: Any) -> list[dict[str, Any]]:
        """Wait for the batched usage writer to store ``count`` rows matching ``where``."""

        def enough() -> list[dict[str, Any]] | None:
            rows = self.usage_rows(**where)
            return rows if len(rows) >= count else None

        return wait_until(enough, timeout=15, what=f"{count} usage rows where {where}")


@pytest.fixture(scope="module", params=["daphne", "uvicorn"])
def openai_server(request: pytest.FixtureRequest) -> str:
    """The HTTP server of the OpenAI API (`openai.server`): a module using it runs twice."""
    return request.param


@pytest.fixture(scope="module")
def openai_stack_factory(
    tmp_path_factory: pytest.TempPathFactory, tokens: Tokens
) -> Iterator[Callable[..., OpenAIStack]]:
    """``openai_stack_factory(build_config, env=None, name="edge", server="daphne")`` starts an
    Edge.

    ``build_config(tokens, public_port, admin_port)`` returns the config; ``env`` adds to the
    Edge's environment (``IOP_MAX_BODY_BYTES``, ``IOP_RUN_TIMEOUT_S``, ``LOG_LEVEL``, ...). With
    ``server="uvicorn"`` the OpenAI API moves to an `openai.listen` of its own served by uvicorn
    (`openai.server`); ``stack.edge.openai_url`` is where it is served either way.
    Nodes come from ``stack.start_node``. At the module's end clients close, Nodes stop, then Edges.
    """
    edges: list[EdgeProcess] = []
    nodes: list[NodeProcess] = []
    clients: list[openai.OpenAI] = []

    def register(thing: Any) -> None:
        if isinstance(thing, NodeProcess):
            nodes.append(thing)
            _live_processes.append(thing)
        else:
            clients.append(thing)

    def start(
        build_config: Callable[[Tokens, int, int], dict[str, Any]],
        env: dict[str, str] | None = None,
        name: str = "edge",
        server: str = "daphne",
    ) -> OpenAIStack:
        public = free_port()
        while (admin := free_port()) == public:
            pass
        config = build_config(tokens, public, admin)
        if server != "daphne":  # the OpenAI API on a listener of its own, served by `server`
            while (openai_port := free_port()) in (public, admin):
                pass
            config["openai"].update(listen=f"127.0.0.1:{openai_port}", server=server)
        edge = EdgeProcess(tmp_path_factory.mktemp(name), config)
        edge.env.update(env or {})
        edges.append(edge)
        _live_processes.append(edge)
        edge.start()
        return OpenAIStack(edge, tokens, register)

    yield start
    for client in clients:
        client.close()
    for process in [*reversed(nodes), *reversed(edges)]:
        process.stop()
        if process in _live_processes:
            _live_processes.remove(process)
