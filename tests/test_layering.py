"""What may import what (docs/architecture.md), checked by importing with the rest blocked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DJANGO_STACK = ("django", "channels", "rest_framework", "daphne")

# Packages whose every module is core, and single core modules beside the Django shell.
CORE_PACKAGES = ("edge.config", "edge.dispatch", "edge.metrics", "nodes.wire", "nodes.agent")
CORE_MODULES = (
    "edge.dashboard.data",
    "edge.governance.figures",
    "edge.governance.limits",
    "edge.ha.elector",
    "edge.ha.pg_lock",
    "edge.ha.role",
    "edge.runtime",
    "edge.runs",
    "edge.usage",
    "edge.usage_rollup",
    "edge.usage_scope",
    "edge.usage_tables",
    "edge.tokens",
    "edge.memory",
    "edge.pacing",
    "edge.json_pieces",
    "edge.mirror_delta",
    "nodes.sessions",
    "nodes.log_limit",
    "nodes.ack_log",
    "refresh.actor",
    "refresh.classify",
    "refresh.outcome",
    "refresh.paths",
    "refresh.plan",
    "refresh.plan_worker",
    "refresh.report",
)

# argv: blocked top-level names, packages to walk, single modules; then runs `python -m` of the
# module named by IMPORT_THEN_RUN, if set, as the command line would.
IMPORT_BLOCKED = """
import importlib, os, pkgutil, runpy, sys

blocked = set(sys.argv[1].split(","))

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ImportError(f"{name} must not be imported here")
        return None

sys.meta_path.insert(0, Blocker())
names = list(sys.argv[3:])
for package in sys.argv[2].split(","):
    module = importlib.import_module(package)
    names += [i.name for i in pkgutil.walk_packages(module.__path__, f"{package}.")]
for name in names:
    if not name.endswith(".__main__"):
        importlib.import_module(name)
print(len(names))
if os.environ.get("IMPORT_THEN_RUN"):
    sys.argv = [os.environ["IMPORT_THEN_RUN"], "--help"]
    runpy.run_module(os.environ["IMPORT_THEN_RUN"], run_name="__main__", alter_sys=True)
"""


def import_with_blocked(
    blocked: tuple[str, ...], packages: tuple[str, ...], modules: tuple[str, ...], run: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", IMPORT_BLOCKED, ",".join(blocked), ",".join(packages), *modules],
        cwd=ROOT,
        env={**os.environ, "IMPORT_THEN_RUN": run},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_core_imports_without_the_django_stack() -> None:
    result = import_with_blocked(DJANGO_STACK, CORE_PACKAGES, CORE_MODULES)

    assert result.returncode == 0, result.stderr
    assert int(result.stdout) > len(CORE_MODULES) + 20  # the packages' modules were walked too


def test_the_node_agent_imports_and_runs_without_the_edge() -> None:
    result = import_with_blocked(
        (*DJANGO_STACK, "edge"), ("nodes.wire", "nodes.agent"), (), "nodes.agent"
    )

    assert result.returncode == 0, result.stderr
    assert "--node-id" in result.stdout
