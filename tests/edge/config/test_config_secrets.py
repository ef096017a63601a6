"""Config errors name the path and what is expected, never the value of a secret-bearing field."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from edge.config import ConfigError, load_config_text
from tests.e2e.harness import Tokens, echo_config
from tests.edge.config.secret_plants import (
    PLANTS,
    SOLO_PLANTS,
    TAGGED_YAML,
    leaked,
    plant_paths,
    planted,
)

ROOT = Path(__file__).resolve().parents[3]
BASE = echo_config(Tokens(), 18000, 18001)


def refusal(config: dict[str, Any] | str) -> ConfigError:
    text = config if isinstance(config, str) else yaml.safe_dump(config, sort_keys=False)
    with pytest.raises(ConfigError) as caught:
        load_config_text(text)
    return caught.value


@pytest.mark.parametrize("name", [*PLANTS, *SOLO_PLANTS])
def test_a_planted_secret_is_refused_without_being_quoted(name: str) -> None:
    error = refusal(planted(BASE, name))

    assert plant_paths(BASE, name) <= {issue.path for issue in error.issues}
    assert leaked(str(error)) == []


def test_every_plant_at_once_is_reported_and_none_is_quoted() -> None:
    error = refusal(planted(BASE))

    assert plant_paths(BASE) <= {issue.path for issue in error.issues}
    assert leaked(str(error)) == []


def test_a_url_is_named_without_its_query() -> None:
    error = refusal(planted(BASE, "base_url query"))

    [issue] = [i for i in error.issues if i.path == "nodes[node-a].adapters[query].base_url"]
    assert issue.message == "must not have a query or fragment (got http://127.0.0.1:9/v1 with one)"


def test_an_explicitly_tagged_yaml_value_is_not_quoted() -> None:
    error = refusal(TAGGED_YAML)

    assert [str(issue) for issue in error.issues] == [
        "line 2, column 12: invalid YAML value: cannot read this value as int"
    ]


@pytest.mark.parametrize("command", ["check_config", "run_edge --config"])
def test_the_commands_print_no_planted_secret(tmp_path: Path, command: str) -> None:
    path = tmp_path / "edge.yaml"
    path.write_text(yaml.safe_dump(planted(BASE), sort_keys=False), encoding="utf-8")

    done = subprocess.run(
        [sys.executable, "manage.py", *command.split(), str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 1
    assert f"{path} is not a valid config" in done.stderr
    assert all(f"\n{p}: " in done.stderr for p in plant_paths(BASE)), done.stderr
    assert leaked(done.stdout + done.stderr) == []
