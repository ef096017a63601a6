"""`make run`'s command: bootstrap, an admin login, the Edge and a local Node, Ctrl-C stops all."""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path

import httpx

from tests.e2e.harness import ROOT, free_port, wait_until


def test_it_runs_a_working_gateway_and_stops_cleanly(tmp_path: Path) -> None:
    public, admin = free_port(), free_port()
    source = (ROOT / "configs" / "edge.yaml").read_text()
    source = source.replace("127.0.0.1:8000", f"127.0.0.1:{public}")
    source = source.replace("127.0.0.1:8001", f"127.0.0.1:{admin}")
    source = source.replace("bootstrap_path: var/bootstrap", f"bootstrap_path: {tmp_path}/boot")
    (tmp_path / "edge.yaml").write_text(source)
    env = {
        **os.environ,
        "IOP_VAR_DIR": str(tmp_path / "var"),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'var' / 'edge.sqlite3'}",
        "PYTHONUNBUFFERED": "1",
    }
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "run_local", "--source", str(tmp_path / "edge.yaml")],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: "Ctrl-C stops" in log.read_text(), timeout=60, what="run_local ready")
        output = log.read_text()
        token = re.search(r"demo client token cli-demo: (\S+) \(shown once\)", output).group(1)
        assert re.search(r"admin login: admin / \S+ \(shown once", output)
        assert "curl http://127.0.0.1:" in output and "from openai import OpenAI" in output
        assert (tmp_path / "boot" / "client-cli-demo.token").read_text().strip() == token

        def answer() -> httpx.Response | None:
            reply = httpx.post(
                f"http://127.0.0.1:{public}/v1/chat/completions",
                headers={"Authorization": f"Bearer {token}"},
                json={"model": "echo", "messages": [{"role": "user", "content": "hello"}]},
            )
            return reply if reply.status_code == 200 else None

        reply = wait_until(answer, timeout=30, what="the local Node to serve")
        assert reply.json()["choices"][0]["message"]["content"] == "echo: hello"

        operator_token = tmp_path / "var" / "bootstrap" / "operator-token"
        assert f"its token is in {operator_token}" in output
        assert stat.S_IMODE(operator_token.stat().st_mode) == 0o600
        status = httpx.get(
            f"http://127.0.0.1:{admin}/status",
            headers={"Authorization": f"Bearer {operator_token.read_text().strip()}"},
        )
        assert status.json()["nodes"]
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=40) == 0
    children = subprocess.run(
        ["pgrep", "-f", str(tmp_path)], capture_output=True, text=True
    ).stdout.split()
    assert children == [], "the Edge and the Node stop with run_local"
