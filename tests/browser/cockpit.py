"""The cockpit: a real Edge with a Node, a staff login and its static files, for a browser.

Used by the browser tests (tests/browser/conftest.py) and by `scripts/screenshots.py`.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
from playwright.sync_api import Page

from tests.e2e.conftest import OpenAIStack
from tests.e2e.harness import ROOT, EdgeProcess, NodeProcess, Tokens, echo_config
from tests.e2e.nodes_support import two_ports

# Generous: the machine may be busy; a wait ends as soon as its condition holds.
PAGE_TIMEOUT_MS = 60_000
SLOW_TOKEN_DELAY_MS = 200


class Cockpit(OpenAIStack):
    """A real Edge for the browser: what :class:`OpenAIStack` offers (``status()``,
    ``start_node()``, ``wait_ready()``, ``in_flight()``, ``wait_idle()``, ``client()``,
    ``usage_rows()``, ``wait_usage()``, ``nodes``) plus the admin login and the operator API.

    Providers: ``echo-1`` (fast, capacity 4, model ``echo``) and ``echo-slow`` (one token every
    200 ms, capacity 2, model ``echo-slow``), both on Node ``node-a``.
    """

    username = "operator"
    password = "cockpit-password-1"

    @property
    def base_url(self) -> str:
        return self.edge.base_url

    @property
    def operator_url(self) -> str:
        return self.edge.operator_url

    @property
    def operator_token(self) -> str:
        return self.edge.operator_token_file.read_text().strip()

    @property
    def api_key(self) -> str:
        """A principal token the OpenAI API accepts (``app-1`` of ``team-a``)."""
        return self.tokens.client("app-1")

    @property
    def config_path(self) -> Path:
        return self.edge.config_path

    def operator(self) -> httpx.Client:
        """An HTTP client for the operator API (`POST /refresh`, `GET /status`), token set."""
        return httpx.Client(
            base_url=self.operator_url, headers=self.edge.operator_headers(), timeout=60
        )

    def kill_node(self, node_id: str = "node-a") -> None:
        """SIGKILL the Node agent and wait until the Edge no longer counts it ready."""
        self.nodes[node_id].kill()
        self.wait_ready(node_id, ready=False)

    def log_in(self, page: Page) -> None:
        """Log ``page`` in to the admin through its login form, as this staff user."""
        page.goto(f"{self.base_url}/admin/login/?next=/admin/")
        page.fill("#id_username", self.username)
        page.fill("#id_password", self.password)
        page.click("input[type=submit]")
        page.wait_for_url("**/admin/")

    def create_superuser(self) -> None:
        subprocess.run(
            [
                *(sys.executable, "manage.py", "createsuperuser", "--noinput"),
                *("--username", self.username, "--email", "operator@example.com"),
            ],
            cwd=ROOT,
            env={**self.edge.env, "DJANGO_SUPERUSER_PASSWORD": self.password},
            check=True,
            capture_output=True,
            timeout=60,
        )


def cockpit_config(tokens: Tokens, public_port: int, admin_port: int) -> dict[str, Any]:
    return echo_config(
        tokens,
        public_port,
        admin_port,
        adapters=[
            {"id": "echo", "type": "echo"},
            {"id": "slow", "type": "echo", "token_delay_ms": SLOW_TOKEN_DELAY_MS},
        ],
        providers=[
            {"id": "echo-1", "adapter": "echo", "served_models": ["echo-small"], "capacity": 4},
            {"id": "echo-slow", "adapter": "slow", "served_models": ["echo-small"], "capacity": 2},
        ],
        models=[
            {"id": "echo", "providers": {"echo-1": "echo-small"}},
            {"id": "echo-slow", "providers": {"echo-slow": "echo-small"}},
        ],
    )


@contextmanager
def running_cockpit(workdir: Path) -> Iterator[Cockpit]:
    """An Edge in ``workdir`` (serving the static files IOP_STATIC_ROOT names, as any Edge), its
    staff user, Node ``node-a`` ready; clients, Nodes and the Edge stopped at the end."""
    nodes: list[NodeProcess] = []
    clients: list[openai.OpenAI] = []

    def register(thing: Any) -> None:
        (nodes if isinstance(thing, NodeProcess) else clients).append(thing)

    tokens = Tokens()
    edge = EdgeProcess(workdir, cockpit_config(tokens, *two_ports()))
    cockpit = Cockpit(edge, tokens, register)
    try:
        edge.start()
        cockpit.create_superuser()
        cockpit.start_node("node-a")
        yield cockpit
    finally:
        for client in clients:
            client.close()
        for process in [*reversed(nodes), edge]:
            process.stop()
