"""`manage.py run_local`: what `make run` does — the Edge and one local Node, ready to call."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from edge.bootstrap import bootstrap
from edge.operator_api.token import (
    OperatorTokenError,
    operator_token_digest,
    operator_token_file,
)
from edge.ports import port_open

STARTUP_TIMEOUT_S = 30


class Command(BaseCommand):
    help = "Bootstrap, then run the Edge and a local Node until Ctrl-C."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--source", default="configs/edge.yaml", help="tracked config")

    def handle(self, *args: Any, **options: Any) -> None:
        config_path = settings.VAR_DIR / "edge.yaml"
        result = bootstrap(Path(options["source"]), config_path, Path.cwd())
        config = result.config
        admin_note = self._ensure_admin(Path(config.edge.bootstrap_path))
        try:
            operator_token_digest(operator_token_file())  # the Edge reads the same file
        except OperatorTokenError as exc:
            raise CommandError(str(exc)) from None
        # Explicit handlers: a shell starting us in the background leaves SIGINT ignored.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _interrupt)
        edge = subprocess.Popen(
            [sys.executable, "manage.py", "run_edge", "--config", str(config_path)]
        )
        nodes = []
        try:
            _wait_for_port(config.edge.listen, edge)
            for node_id, env_file in result.node_env_files.items():
                nodes.append(self._start_node(config.edge.listen, node_id, env_file))
            self._print_examples(config, result, admin_note)
            edge.wait()
        except KeyboardInterrupt:
            self.stdout.write("\nstopping…")
        finally:
            for process in [*nodes, edge]:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for process in [*nodes, edge]:
                try:
                    process.wait(timeout=35)
                except subprocess.TimeoutExpired:
                    process.kill()

    def _ensure_admin(self, bootstrap_dir: Path) -> str:
        """An admin login, created once; its password is printed once and kept 0600."""
        users = get_user_model().objects
        password_file = bootstrap_dir / "admin-password"
        if users.filter(is_superuser=True).exists():
            return f"admin login: as created before (password in {password_file})"
        password = secrets.token_urlsafe(16)
        users.create_superuser("admin", "", password)
        descriptor = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(password + "\n")
        return f"admin login: admin / {password} (shown once; kept in {password_file})"

    def _start_node(self, listen: str, node_id: str, env_file: Path) -> subprocess.Popen:
        token = env_file.read_text().strip().removeprefix("IOP_NODE_TOKEN=")
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nodes.agent",
                "--edge",
                f"ws://{listen}/ws/node/",
                "--node-id",
                node_id,
            ],
            env={**os.environ, "IOP_NODE_TOKEN": token},
        )

    def _print_examples(self, config: Any, result: Any, admin_note: str) -> None:
        api = f"http://{config.openai.listen or config.edge.listen}/v1"
        token_file = next(iter(result.client_token_files.values()), None)
        model = config.models[0].id if config.models else "MODEL"
        for token_ref, token in result.new_client_tokens.items():
            self.stdout.write(f"demo client token {token_ref}: {token} (shown once)")
        token_expr = f"$(cat {token_file})" if token_file else "$TOKEN"
        self.stdout.write(
            f"""
IOP Edge is up: {api} (admin UI http://{config.edge.listen}/admin/)
{admin_note}

  curl {api}/chat/completions -H "Authorization: Bearer {token_expr}" \\
    -H 'Content-Type: application/json' \\
    -d '{{"model": "{model}", "messages": [{{"role": "user", "content": "hello"}}]}}'

  from openai import OpenAI
  client = OpenAI(base_url="{api}", api_key=open("{token_file}").read().strip())
  print(client.chat.completions.create(model="{model}",
        messages=[{{"role": "user", "content": "hello"}}]).choices[0].message.content)

Operator API (loopback): its token is in {operator_token_file()} (`manage.py refresh` reads it)

  curl http://{config.edge.admin_listen}/status \\
    -H "Authorization: Bearer $(cat {operator_token_file()})"

Ctrl-C stops the Edge and the Node.
"""
        )
        self.stdout.flush()


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _wait_for_port(listen: str, process: subprocess.Popen) -> None:
    host, _, port = listen.rpartition(":")
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise CommandError(f"the Edge exited with status {process.returncode}")
        if port_open(host, int(port), timeout_s=0.5):
            return
        time.sleep(0.1)
    raise CommandError(f"the Edge did not listen on {listen} within {STARTUP_TIMEOUT_S} s")
