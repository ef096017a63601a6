"""The Node installs on its own: `iop-node` needs only what the agent imports.

Building and installing the wheel takes a network and a venv; this check stands in for that: the
separate distribution (``node-dist/``) declares exactly the agent's third-party imports, pinned as
the repository pins them. That the agent runs with the Edge's stack unimportable is checked in
``tests/test_layering.py``.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
AGENT_PACKAGES = (ROOT / "nodes" / "agent", ROOT / "nodes" / "wire")


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
