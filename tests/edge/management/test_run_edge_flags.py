"""`run_edge` refuses what it cannot serve before it listens: `edge.ha` on SQLite, bad
`--listen` / `--admin-listen` values (real processes, exit 1, the cause named)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.edge.config.test_config_validation import make_config_dict

ROOT = Path(__file__).resolve().parents[3]


def run_edge(tmp_path: Path, config: dict, *flags: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "edge.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {
        **os.environ,
        "IOP_VAR_DIR": str(tmp_path / "var"),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'edge.sqlite3'}",
    }
    return subprocess.run(
        [sys.executable, "manage.py", "run_edge", "--config", str(path), *flags],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_it_refuses_edge_ha_on_sqlite_naming_the_key(tmp_path: Path) -> None:
    config = make_config_dict()
    config["edge"]["ha"] = True

    result = run_edge(tmp_path, config)

    assert result.returncode == 1
    assert "edge.ha: true needs PostgreSQL" in result.stderr
    assert "DATABASE_URL names SQLite" in result.stderr
    assert "Listening" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--listen", "localhost"], "--listen: must be host:port"),
        (["--admin-listen", "0.0.0.0:18001"], "--admin-listen: must be a loopback address"),
        (["--listen", "127.0.0.1:18001", "--admin-listen", "127.0.0.1:18001"], "already used"),
    ],
)
def test_it_refuses_a_listen_flag_it_cannot_serve(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    result = run_edge(tmp_path, make_config_dict(), *flags)

    assert result.returncode == 1
    assert message in result.stderr
