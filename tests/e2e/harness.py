"""Real processes for end-to-end tests: an Edge under daphne (`run_edge`) and Node agents."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import yaml

from edge.ports import port_open
from edge.tokens import sha256_hex

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(condition: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@dataclass
class Tokens:
    """Raw tokens a test holds; the config only ever sees their hashes."""

    nodes: dict[str, str] = field(default_factory=dict)
    clients: dict[str, str] = field(default_factory=dict)

    def node(self, node_id: str) -> str:
        return self.nodes.setdefault(node_id, f"node-{secrets.token_urlsafe(16)}")

    def client(self, token_ref: str) -> str:
        return self.clients.setdefault(token_ref, f"client-{secrets.token_urlsafe(16)}")


def echo_config(
    tokens: Tokens,
    public_port: int,
    admin_port: int,
    *,
    providers: list[dict[str, Any]] | None = None,
    models: list[dict[str, Any]] | None = None,
    adapters: list[dict[str, Any]] | None = None,
    node_id: str = "node-a",
    extra_nodes: list[dict[str, Any]] | None = None,
    threshold: int = 1000,
    require_auth: bool = True,
) -> dict[str, Any]:
    """A config with one echo Node; tests override providers and models as they need."""
    providers = providers or [
        {"id": "echo-1", "adapter": "echo", "served_models": ["echo-small"], "capacity": 4}
    ]
    models = models or [{"id": "echo", "providers": {"echo-1": "echo-small"}}]
    return {
        "version": 1,
        "edge": {
            "id": "edge-test",
            "listen": f"127.0.0.1:{public_port}",
            "admin_listen": f"127.0.0.1:{admin_port}",
        },
        "openai": {
            "long_context_threshold_tokens": threshold,
            "require_auth": require_auth,
            "principal_tokens": [
                {
                    "token_ref": "app-1",
                    "token_hash_sha256": sha256_hex(tokens.client("app-1")),
                    "principal_ref": "team-a",
                    "alias": "first app",
                },
                {
                    "token_ref": "app-2",
                    "token_hash_sha256": sha256_hex(tokens.client("app-2")),
                    "principal_ref": "team-a",
                },
            ],
        },
        "queue": {"max_queue": 8, "queue_timeout_s": 5},
        "nodes": [
            {
                "id": node_id,
                "token_hash_sha256": sha256_hex(tokens.node(node_id)),
                "adapters": adapters or [{"id": "echo", "type": "echo"}],
                "providers": providers,
            },
            *(extra_nodes or []),
        ],
        "models": models,
    }


class EdgeProcess:
    """`manage.py run_edge` in its own var dir (own SQLite database), on free ports."""

    def __init__(self, workdir: Path, config: dict[str, Any]) -> None:
        self.workdir = workdir
        self.var_dir = workdir / "var"
        self.config_path = workdir / "edge.yaml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.public_port = int(config["edge"]["listen"].rpartition(":")[2])
        self.admin_port = int(config["edge"]["admin_listen"].rpartition(":")[2])
        openai_listen = config.get("openai", {}).get("listen")
        self._openai_listen_port = int(openai_listen.rpartition(":")[2]) if openai_listen else None
        self.log_path = workdir / "edge.log"
        self.operator_token_file = self.var_dir / "operator-token"  # the Edge creates it
        self.env = {
            **os.environ,
            "IOP_VAR_DIR": str(self.var_dir),
            "IOP_OPERATOR_TOKEN_FILE": str(self.operator_token_file),
            "DATABASE_URL": f"sqlite:///{self.var_dir / 'edge.sqlite3'}",
            "IOP_NODE_PING_INTERVAL_S": "1",
            "IOP_NODE_HELLO_TIMEOUT_S": "2",
            "PYTHONUNBUFFERED": "1",
        }
        self.process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.public_port}"

    @property
    def openai_port(self) -> int:
        """Where the OpenAI API is served: `openai.listen` when set, else the public listener."""
        return self._openai_listen_port or self.public_port

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.openai_port}"

    @property
    def completions_url(self) -> str:
        return f"{self.openai_url}/v1/chat/completions"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.public_port}/ws/node/"

    @property
    def operator_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def operator_headers(self) -> dict[str, str]:
        """What a call to the operator API sends: the operator token this Edge created."""
        return {"Authorization": f"Bearer {self.operator_token_file.read_text().strip()}"}

    def start(self) -> Self:
        self.var_dir.mkdir(parents=True, exist_ok=True)
        self.migrate()
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                *(sys.executable, "manage.py", "run_edge", "--config", str(self.config_path)),
                *self.run_edge_flags(),
            ],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        wait_until(
            lambda: self.process.poll() is not None or self.listening(),
            timeout=30,
            what=f"{self.name} to listen",
        )
        assert self.process.poll() is None, self.log()
        return self

    name = "the Edge"

    def migrate(self) -> None:
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=self.env, check=True
        )

    def run_edge_flags(self) -> list[str]:
        """Flags added to `run_edge --config` (none: the config's listeners)."""
        return []

    def listening(self) -> bool:
        ports = {self.public_port, self.admin_port, self.openai_port}
        return all(port_open("127.0.0.1", port) for port in ports)

    def listen_flags(self) -> list[str]:
        """`--listen` and `--admin-listen` for this process's own ports."""
        return [
            *("--listen", f"127.0.0.1:{self.public_port}"),
            *("--admin-listen", f"127.0.0.1:{self.admin_port}"),
        ]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.var_dir / "edge.sqlite3")

    def stop(self) -> None:
        stop_process(self.process)


class NodeProcess:
    """`python -m nodes.agent` for one node, its token in the environment."""

    def __init__(self, workdir: Path, edge: EdgeProcess, node_id: str, token: str) -> None:
        self.log_path = workdir / f"node-{node_id}.log"
        self.args = [
            sys.executable,
            "-m",
            "nodes.agent",
            "--edge",
            edge.ws_url,
            "--node-id",
            node_id,
        ]
        self.env = {**os.environ, "IOP_NODE_TOKEN": token, "PYTHONUNBUFFERED": "1"}
        self.process: subprocess.Popen | None = None

    def start(self) -> NodeProcess:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.args, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT
        )
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        stop_process(self.process)


def stop_process(process: subprocess.Popen | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
