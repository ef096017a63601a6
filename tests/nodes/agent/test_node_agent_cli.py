"""``python -m nodes.agent``: flags, the token, and a real process draining on SIGTERM."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from nodes.agent import cli
from nodes.agent.cli import main, parse_settings
from nodes.wire.collector import SERVING_THRESHOLDS

ROOT = Path(__file__).resolve().parents[3]
EDGE = ["--edge", "ws://127.0.0.1:9/ws/node/", "--node-id", "node-a"]


def test_it_exits_2_without_a_token(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(EDGE, environ={}) == 2
    assert "no node token: set IOP_NODE_TOKEN or pass --token-file PATH" in capsys.readouterr().err


@pytest.mark.parametrize("flag", [["--token", "secret"], ["--token=secret"]])
def test_it_refuses_a_token_on_the_command_line(
    capsys: pytest.CaptureFixture[str], flag: list[str]
) -> None:
    assert main([*EDGE, *flag], environ={"IOP_NODE_TOKEN": "t"}) == 2
    err = capsys.readouterr().err
    assert "--token is not accepted" in err
    assert "secret" not in err


def test_it_reads_the_token_from_the_environment() -> None:
    settings, _ = parse_settings(EDGE, {"IOP_NODE_TOKEN": " env-token\n"})
    assert settings.token == "env-token"
    assert "env-token" not in repr(settings)


def test_it_prefers_the_token_file(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("file-token\n")
    settings, _ = parse_settings(
        [*EDGE, "--token-file", str(token_file)], {"IOP_NODE_TOKEN": "env-token"}
    )
    assert settings.token == "file-token"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*EDGE, "--token-file", "/nonexistent/token"], "--token-file: cannot read"),
        (["--edge", "http://127.0.0.1/ws/node/", "--node-id", "n"], "--edge: "),
        (["--edge", "ws://h/ws/node/", "--node-id", " "], "--node-id must not be empty"),
        ([*EDGE, "--drain-timeout", "-1"], "--drain-timeout must be >= 0"),
    ],
)
def test_it_names_the_flag_that_is_wrong(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(argv, environ={"IOP_NODE_TOKEN": "t"}) == 2
    assert message in capsys.readouterr().err


def test_it_takes_the_allowed_env_names_from_flags_and_the_environment() -> None:
    environ = {"IOP_NODE_TOKEN": "t", "IOP_NODE_ALLOWED_ENV": "C_TOKEN,D_TOKEN"}
    argv = [*EDGE, "--allow-env", "A_TOKEN", "--allow-env", "B_TOKEN"]
    settings, _ = parse_settings(argv, environ)
    assert settings.allowed_env == {"A_TOKEN", "B_TOKEN", "C_TOKEN", "D_TOKEN"}
    assert settings.environ is environ


@pytest.mark.parametrize(
    ("allowed", "message"),
    [
        (["--allow-env", "IOP_NODE_TOKEN"], "IOP_NODE_TOKEN holds the node token"),
        (["--allow-env", "A-B"], "'A-B' is not an environment variable name"),
    ],
)
def test_it_refuses_the_token_or_a_non_name_as_an_allowed_env_name(
    capsys: pytest.CaptureFixture[str], allowed: list[str], message: str
) -> None:
    assert main([*EDGE, *allowed], environ={"IOP_NODE_TOKEN": "t"}) == 2
    assert f"--allow-env / IOP_NODE_ALLOWED_ENV: {message}" in capsys.readouterr().err


def test_it_requires_edge_and_node_id(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--edge", "ws://h/"], environ={"IOP_NODE_TOKEN": "t"})
    assert caught.value.code == 2
    assert "--node-id" in capsys.readouterr().err


async def start_process(*args: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "nodes.agent",
        *args,
        cwd=ROOT,
        env={"PATH": os.environ.get("PATH", ""), **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def test_the_real_process_exits_2_without_a_token() -> None:
    process = await start_process(*EDGE, env={})
    async with asyncio.timeout(20):
        _, err = await process.communicate()
    assert process.returncode == 2
    assert b"IOP_NODE_TOKEN" in err


async def test_sigterm_lets_the_running_run_finish_then_exits_0(edge: Any, fakes: Any) -> None:
    process = await start_process(
        "--edge", edge.url, "--node-id", "node-a", env={"IOP_NODE_TOKEN": fakes.TOKEN}
    )
    try:
        connection = await edge.next_connection()
        await connection.handshake(fakes.make_node(token_delay_ms=40))
        words = " ".join(f"w{i}" for i in range(15))  # 16 tokens, ~0.6 s at 40 ms each
        await connection.send(fakes.run_request("slow", words))
        await connection.expect("run.event", run_id="slow", event="delta")

        process.send_signal(signal.SIGTERM)
        draining = {"healthy": False, "detail": "node draining"}
        await connection.expect("provider.health", providers={"p-echo": draining})
        await connection.send(fakes.run_request("late"))
        late = await connection.expect("run.event", run_id="late")
        done = await connection.expect("run.event", run_id="slow", event="done")
        await fakes.wait(connection.closed)
        async with asyncio.timeout(10):
            _, err = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert late["data"]["code"] == "node_draining"
    assert done["data"]["usage"]["completion_tokens"] == 16
    assert process.returncode == 0, err.decode()
    assert connection.websocket.close_code == 1001
    assert b"stopped" in err


def test_the_agent_runs_with_the_serving_collector_thresholds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[int, int, int]] = []

    def run(agent: Coroutine[Any, Any, None]) -> None:
        seen.append(gc.get_threshold())
        agent.close()

    before = gc.get_threshold()
    websockets_log = logging.getLogger("websockets")
    monkeypatch.setattr(cli.uvloop, "run", run)
    monkeypatch.setattr(websockets_log, "level", websockets_log.level)  # main sets it
    try:
        assert main(EDGE, environ={"IOP_NODE_TOKEN": "t"}) == 0
    finally:
        gc.set_threshold(*before)
    assert seen == [SERVING_THRESHOLDS]
