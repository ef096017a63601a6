"""psycopg is imported only on PostgreSQL (about 10 MB of the Edge's memory): Django REST
framework maps PostgreSQL's model fields there alone, and only an HA Edge imports the lock."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# What a process of the Edge imports: Django set up, run_edge, the ASGI application, DRF.
PROBE = """
import sys
import django
django.setup()
import edge.management.commands.run_edge
import iop_site.asgi
from rest_framework import compat, serializers
print(compat.postgres_fields is not None, "psycopg" in sys.modules)
"""


def imports_with(database_url: str, tmp_path: Path) -> str:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "iop_site.settings",
        "DATABASE_URL": database_url,
        "IOP_VAR_DIR": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_on_sqlite_neither_the_fields_nor_psycopg_are_imported(tmp_path: Path) -> None:
    assert imports_with(f"sqlite:///{tmp_path / 'edge.sqlite3'}", tmp_path) == "False False"


@pytest.mark.parametrize("scheme", ["postgres", "postgresql"])
def test_on_postgresql_drf_maps_the_fields_as_before(tmp_path: Path, scheme: str) -> None:
    # Setting up Django connects to nothing: no server is needed for this.
    assert imports_with(f"{scheme}://user@127.0.0.1:9/iop", tmp_path) == "True True"
