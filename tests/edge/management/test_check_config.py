from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ROOT / "configs"


def check_config(path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "check_config", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_it_prints_the_revision_and_a_summary_for_both_examples():
    for name, summary in [
        ("edge.yaml", "1 nodes, 3 providers, 2 models, 1 principal tokens"),
        ("edge.provider-pool.yaml", "3 nodes, 4 providers, 2 models, 3 principal tokens"),
    ]:
        result = check_config(CONFIGS / name)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert lines[0].startswith("revision sha256:") and len(lines[0]) == len("revision ") + 71
        assert summary in lines[1]


def test_it_exits_1_with_one_line_per_error(tmp_path):
    text = (CONFIGS / "edge.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        text.replace("capacity: 2", "capcity: 2").replace("priority: 50", "priority: -1")
    )

    result = check_config(bad)

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"CommandError: {bad} is not a valid config (3 problems):",
        "nodes[node-local].providers[echo-overflow].capcity: unknown key; did you mean 'capacity'?",
        "nodes[node-local].providers[echo-overflow].capacity: is required",
        "nodes[node-local].providers[echo-overflow].priority: must be >= 0 (got -1)",
    ]
    assert "Traceback" not in result.stderr


def test_it_names_a_missing_file(tmp_path):
    result = check_config(tmp_path / "missing.yaml")

    assert result.returncode == 1
    assert "missing.yaml" in result.stderr
