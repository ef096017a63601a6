"""The Node installs on its own: no Django, and `iop-node` needs only what the agent imports.

Building and installing the wheel takes a network and a venv; these checks stand in for that:
the agent's modules import and its CLI runs with the Edge's stack unimportable, and the separate
distribution (``node-dist/``) declares exactly the agent's third-party imports, pinned as the
repository pins them.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AGENT_PACKAGES = (ROOT / "nodes" / "agent", ROOT / "nodes" / "wire")

# Imports every module of the agent and the wire package with the Edge's stack blocked, then runs
# the CLI as ``python -m nodes.agent --help`` would.
WITHOUT_THE_EDGE = """
import importlib, pkgutil, runpy, sys

BLOCKED = {"django", "channels", "rest_framework", "edge"}

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} must not be imported by the Node")
        return None

sys.meta_path.insert(0, Blocker())
for package in ("nodes.wire", "nodes.agent"):
    module = importlib.import_module(package)
    for info in pkgutil.walk_packages(module.__path__, f"{package}."):
        if not info.name.endswith(".__main__"):
            importlib.import_module(info.name)
sys.argv = ["nodes.agent", "--help"]
runpy.run_module("nodes.agent", run_name="__main__", alter_sys=True)
"""


def test_the_agent_imports_and_runs_without_the_edge_stack() -> None:
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_THE_EDGE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "--node-id" in result.stdout


def requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9_.-]+", requirement)
    assert match is not None, requirement
    return match.group().lower()


def third_party_imports() -> set[str]:
    names: set[str] = set()
    for package in AGENT_PACKAGES:
        for source in package.rglob("*.py"):
            for node in ast.walk(ast.parse(source.read_text(), str(source))):
                if isinstance(node, ast.Import):
                    names.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    return {
        n for n in names if n not in sys.stdlib_module_names and n not in ("nodes", "__future__")
    }


def test_the_node_dist_declares_exactly_the_agents_dependencies() -> None:
    node_dist = tomllib.loads((ROOT / "node-dist" / "pyproject.toml").read_text())["project"]
    repository = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = set(node_dist["dependencies"])
    assert {requirement_name(r) for r in declared} == third_party_imports()
    # The same pins as the Edge's install, so both run the versions the tests ran.
    assert declared <= set(repository["dependencies"])
    assert node_dist["scripts"] == {"iop-node": "nodes.agent.cli:main"}
