"""`manage.py refresh` against a real Edge (`run_edge` under daphne) and a real Node agent."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from refresh.actor import current_os_user
from tests.e2e.harness import (
    ROOT,
    EdgeProcess,
    NodeProcess,
    Tokens,
    echo_config,
    free_port,
    wait_until,
)
from tests.refresh.refresh_helpers import STALE_BASE, with_adapter_change, with_capacity, yaml_of

CAPACITY = "nodes[node-a].providers[echo-1].capacity"


@dataclass
class Cli:
    code: int
    out: str
    err: str


class Running:
    """An Edge with node-a connected, and the CLI pointed at it through IOP_CONFIG."""

    def __init__(self, edge: EdgeProcess, config: dict) -> None:
        self.edge = edge
        self.config = config
        self.env = {**edge.env, "IOP_CONFIG": str(edge.config_path)}

    def status(self) -> dict:
        return httpx.get(
            f"{self.edge.operator_url}/status", headers=self.edge.operator_headers(), timeout=5
        ).json()

    def refresh(self, *args: str) -> Cli:
        done = subprocess.run(
            [sys.executable, "manage.py", "refresh", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return Cli(done.returncode, done.stdout, done.stderr)

    def write_candidate(self, config: dict, name: str = "candidate.yaml") -> Path:
        path = self.edge.workdir / name
        path.write_text(yaml_of(config))
        return path


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("edge")
    tokens = Tokens()
    config = echo_config(tokens, free_port(), free_port())
    edge = EdgeProcess(workdir, config).start()
    node = NodeProcess(workdir, edge, "node-a", tokens.node("node-a")).start()
    running = Running(edge, config)
    try:
        wait_until(
            lambda: running.status()["nodes"].get("node-a", {}).get("ready"),
            timeout=20,
            what=f"node-a to be ready\n{node.log()}",
        )
        yield running
    finally:
        node.stop()
        edge.stop()


def test_it_plans_then_applies_a_live_change(running):
    running.edge.config_path.write_text(yaml_of(with_capacity(running.config, 8)))

    plan = running.refresh()

    assert plan.code == 0, plan.err
    assert f"  ~ {CAPACITY}: 4 → 8 (live)" in plan.out
    assert "Plan: 1 change (1 live, 0 restart required)." in plan.out
    assert "Dry run OK: 1 live change would apply" in plan.out
    assert running.status()["providers"]["echo-1"]["capacity"] == 4
    hint = re.search(r"Apply it with: python manage.py refresh (.*)", plan.out)
    assert hint and "--base-revision sha256:" in hint[1]
    assert "--candidate-revision sha256:" in hint[1]

    # The file changed after the review: the reviewed command refuses it.
    running.edge.config_path.write_text(yaml_of(with_capacity(running.config, 9)))
    changed = running.refresh(*hint[1].split())
    assert changed.code == 1 and "the plan was reviewed for" in changed.out
    assert running.status()["providers"]["echo-1"]["capacity"] == 4

    running.edge.config_path.write_text(yaml_of(with_capacity(running.config, 8)))
    applied = running.refresh(*hint[1].split())

    assert applied.code == 0, applied.err
    assert f"  ~ {CAPACITY}: 4 → 8 (live)" in applied.out
    assert "Node pushes:\n  node-a: acked" in applied.out
    assert re.search(
        r"Applied sha256:[0-9a-f]{12}… \(1 live change\); pushed to node-a: acked\.", applied.out
    )
    status = running.status()
    assert status["providers"]["echo-1"]["capacity"] == 8
    assert status["nodes"]["node-a"]["acked_revision"] == status["revision"]
    assert running.edge.config_path.with_name("edge.yaml.bak").exists()
    running.config = with_capacity(running.config, 8)
    # The apply's record links to the dry run it carried out, and says who ran the command.
    dry_run, apply = (record(running, line) for line in (plan.out, applied.out))
    assert apply["applied_from_id"] == dry_run["id"]
    for row in (dry_run, apply):
        assert (row["token_name"], row["os_user"]) == ("operator-token", current_os_user())
        assert row["requested_by"] == f"{current_os_user()} with operator-token"
        assert row["request_id"].startswith("cli-")


def test_it_sends_a_reason_for_the_record(running):
    path = running.write_candidate(with_capacity(running.config, 5))

    done = running.refresh("--file", str(path), "--reason", "ticket OPS-7: try five")
    too_long = running.refresh("--file", str(path), "--reason", "x" * 501)

    assert done.code == 0, done.err
    assert record(running, done.out)["reason"] == "ticket OPS-7: try five"
    assert too_long.code == 1
    assert "answered HTTP 400: reason: Ensure this field has no more than 500 characters." in (
        too_long.err
    )


def record(running: Running, output: str) -> dict:
    """The refresh record of the refresh whose output this is, read from the Edge's database."""
    refresh_id = re.search(r"Refresh (rf-[0-9a-f]+) ", output)[1]
    with closing(running.edge.db()) as db:
        db.row_factory = sqlite3.Row
        row = db.execute(
            "SELECT * FROM refresh_refreshrecord WHERE refresh_id = ?", (refresh_id,)
        ).fetchone()
    return dict(row)


def test_it_exits_2_when_a_restart_is_required(running):
    config = with_adapter_change(with_capacity(running.config, 3))
    config["edge"]["listen"] = "127.0.0.1:1"
    revision = running.status()["revision"]

    refused = running.refresh("--apply", "--file", str(running.write_candidate(config)))

    assert refused.code == 2, refused.err
    assert f"~ {CAPACITY}: 8 → 3 (live)" in refused.out
    listen = running.config["edge"]["listen"]
    assert f"! edge.listen: {listen} → 127.0.0.1:1 (restart required)" in refused.out
    assert "+ nodes[node-a].adapters[echo-2] (restart required)" in refused.out
    assert "Refused: 2 changes would need an Edge restart; nothing was changed." in refused.out
    assert running.status()["revision"] == revision


def test_it_exits_1_on_an_invalid_candidate(running):
    path = running.write_candidate(with_capacity(running.config, 0))

    invalid = running.refresh("--apply", "--file", str(path))

    assert invalid.code == 1
    assert f"Errors:\n  {CAPACITY}: " in invalid.out
    assert "Invalid: 1 error; nothing was changed." in invalid.out


def test_it_exits_1_on_a_stale_plan(running):
    path = running.write_candidate(with_capacity(running.config, 5))

    stale = running.refresh("--apply", "--file", str(path), "--base-revision", STALE_BASE)

    assert stale.code == 1
    assert f"Stale: the plan was made against {STALE_BASE}" in stale.out
    assert running.status()["providers"]["echo-1"]["capacity"] == 8


def test_it_prints_the_result_as_json(running):
    path = running.write_candidate(with_capacity(running.config, 5))

    answer = running.refresh("--json", "--file", str(path))

    assert answer.code == 0
    result = json.loads(answer.out)
    assert (result["mode"], result["status"]) == ("dry_run", "ok")
    assert result["changes"][0]["new"] == 5


def test_it_sends_the_operator_token_and_is_refused_without_the_right_one(running, tmp_path):
    wrong = tmp_path / "wrong-token"
    wrong.write_text("not-the-operator-token\n")

    refused = running.refresh("--token-file", str(wrong))
    missing = running.refresh("--token-file", str(tmp_path / "missing"))

    assert refused.code == 1
    assert "answered HTTP 401: Missing or wrong operator token" in refused.err
    assert missing.code == 1
    assert f"cannot read the operator token from {tmp_path / 'missing'}" in missing.err
    assert "The Edge creates it on its first start" in missing.err


def test_it_exits_1_naming_the_url_when_the_edge_is_unreachable(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/refresh"
    (tmp_path / "operator-token").write_text("some-token\n")
    env = {
        **os.environ,
        "IOP_VAR_DIR": str(tmp_path),
        "IOP_OPERATOR_TOKEN_FILE": str(tmp_path / "operator-token"),
    }

    done = subprocess.run(
        [sys.executable, "manage.py", "refresh", "--url", url],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 1
    assert f"cannot reach the Edge at {url}" in done.stderr


def test_it_exits_1_not_2_on_a_usage_error(tmp_path):
    env = {**os.environ, "IOP_VAR_DIR": str(tmp_path)}

    done = subprocess.run(
        [sys.executable, "manage.py", "refresh", "--no-such-option"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 1
    assert "unrecognized arguments: --no-such-option" in done.stderr
