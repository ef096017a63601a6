"""What the Edge writes is its owner's only: 0700 directories, 0600 files, the key made 0600."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from tests.conftest import CONFIGS, ROOT


def modes_under(root: Path) -> dict[str, int]:
    return {
        str(path.relative_to(root)) or ".": stat.S_IMODE(path.stat().st_mode)
        for path in [root, *root.rglob("*")]
    }


def manage(var_dir: Path, *args: str) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DATABASE_URL")},
        "IOP_VAR_DIR": str(var_dir),
        "IOP_GENERATE_SECRET_KEY": "true",
    }
    subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, timeout=120)


def test_migrate_and_bootstrap_leave_nothing_readable_by_others(tmp_path: Path) -> None:
    var_dir = tmp_path / "var"
    source = (CONFIGS / "edge.yaml").read_text()
    source = source.replace("bootstrap_path: var/bootstrap", f"bootstrap_path: {var_dir}/bootstrap")
    (tmp_path / "edge.yaml").write_text(source)

    manage(var_dir, "migrate", "-v0")
    manage(
        var_dir,
        "bootstrap_edge",
        "--source",
        str(tmp_path / "edge.yaml"),
        "--output",
        str(var_dir / "edge.yaml"),
    )

    modes = modes_under(var_dir)
    assert {"secret_key", "iop_edge.sqlite3", "edge.yaml", "bootstrap"} <= set(modes)
    assert any(name.startswith("bootstrap/") for name in modes)
    wrong = {
        name: oct(mode)
        for name, mode in modes.items()
        if mode != (0o700 if (var_dir / name).is_dir() else 0o600)
    }
    assert wrong == {}


def test_a_var_dir_made_open_before_is_closed_at_start(tmp_path: Path) -> None:
    var_dir = tmp_path / "var"
    var_dir.mkdir()
    var_dir.chmod(0o755)

    manage(var_dir, "check")

    assert stat.S_IMODE(var_dir.stat().st_mode) == 0o700


def test_the_key_is_created_0600_whatever_the_umask(tmp_path: Path) -> None:
    from iop_site.settings import _generated_secret_key

    previous = os.umask(0)
    try:
        key = _generated_secret_key(tmp_path / "secret_key")
    finally:
        os.umask(previous)

    assert stat.S_IMODE((tmp_path / "secret_key").stat().st_mode) == 0o600
    assert key and _generated_secret_key(tmp_path / "secret_key") == key  # the first key stays
    assert os.listdir(tmp_path) == ["secret_key"]
