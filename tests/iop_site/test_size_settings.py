"""The size settings agree with the wire: a body limit the wire cannot carry is refused at start."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nodes import wire
from tests.conftest import ROOT


def django_check(tmp_path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={**os.environ, "IOP_VAR_DIR": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        (
            "IOP_MAX_BODY_BYTES",
            str(wire.MAX_BODY_BYTES + 1),
            f"between 1 and {wire.MAX_BODY_BYTES}",
        ),
        ("IOP_MAX_BODY_BYTES", "0", f"between 1 and {wire.MAX_BODY_BYTES}"),
        ("IOP_MAX_RUN_OUTPUT_BYTES", "-1", "positive byte count"),
    ],
)
def test_a_size_out_of_bounds_stops_the_edge_with_its_name(
    tmp_path, name: str, value: str, says: str
) -> None:
    result = django_check(tmp_path, **{name: value})

    assert result.returncode != 0
    assert f"{name} must be" in result.stderr and says in result.stderr


def test_a_lower_body_limit_is_fine(tmp_path) -> None:
    assert django_check(tmp_path, IOP_MAX_BODY_BYTES="65536").returncode == 0
