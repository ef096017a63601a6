"""An Edge as a benchmark meets it: `manage.py run_edge` in a subprocess with its own var dir and
SQLite database, spoken to over HTTP like an operator would (the operator token included)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from edge.ports import port_open

ROOT = Path(__file__).resolve().parent.parent


def rounded(value: Any, digits: int = 4) -> Any:
    """``value`` with its floats rounded, nested dicts included: a benchmark's JSON line."""
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {key: rounded(item, digits) for key, item in value.items()}
    return value


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class EdgeProcess:
    """One Edge under daphne, serving ``config_path``; ``workdir`` holds its var dir and log."""

    def __init__(self, workdir: Path, config_path: Path, public_port: int, admin_port: int) -> None:
        self.workdir = workdir
        self.config_path = config_path
        self.public_port = public_port
        self.admin_port = admin_port
        self.var = workdir / "var"
        self.var.mkdir(exist_ok=True)
        self.env = {
            **os.environ,
            "IOP_VAR_DIR": str(self.var),
            "DATABASE_URL": os.environ.get(
                "BENCH_DATABASE_URL", f"sqlite:///{self.var / 'bench.sqlite3'}"
            ),
            "LOG_LEVEL": "WARNING",
            "IOP_GENERATE_SECRET_KEY": "true",
            "IOP_SILENCED_SYSTEM_CHECKS": "edge.W001",
        }
        self.log: IO[bytes] = (workdir / "edge.log").open("ab")
        self.process: subprocess.Popen[bytes] | None = None

    def migrate(self) -> None:
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=self.env, check=True
        )

    def start(self, timeout: float = 120.0) -> float:
        """Start it and wait until its listeners answer; the seconds that took."""
        started = time.monotonic()
        self.process = spawn(
            [sys.executable, "manage.py", "run_edge", "--config", str(self.config_path)],
            self.env,
            self.log,
        )
        wait_for(
            lambda: port_open("127.0.0.1", self.public_port)
            and port_open("127.0.0.1", self.admin_port),
            timeout,
            "the Edge",
        )
        return time.monotonic() - started

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def operator(self, method: str, path: str, body: Any = None, timeout: float = 120.0) -> Any:
        """An operator API call: its JSON answer (also on a 4xx, which a refusal is)."""
        token = (self.var / "bootstrap" / "operator-token").read_text().strip()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.admin_port}{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as reply:
                return json.loads(reply.read())
        except urllib.error.HTTPError as refused:
            return json.loads(refused.read())

    def status(self) -> dict[str, Any]:
        return self.operator("GET", "/status")

    def stop(self) -> None:
        stop(self.process)
        self.log.close()


def spawn(args: list[str], env: dict[str, str], log: IO[bytes]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def stop(process: subprocess.Popen[bytes] | None, timeout: float = 15.0) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
