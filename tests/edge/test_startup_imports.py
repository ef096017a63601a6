"""The Edge imports its views before it serves: not on the event loop at the first request; and
not the schema's generator, which only `GET /api/schema/` needs."""

from __future__ import annotations

import os
import subprocess
import sys

CHECK = """
import sys
import django
django.setup()
assert "edge.operator_api.urls" not in sys.modules, "imported before: nothing to show"
from edge.startup import import_views
import_views()
assert "edge.operator_api.urls" in sys.modules
assert "refresh.views" in sys.modules
"""

WITHOUT_THE_GENERATOR = """
import sys
import django
django.setup()
from edge.startup import import_views
import_views()
left_out = ("drf_spectacular.openapi", "drf_spectacular.plumbing", "django.test", "unittest")
print(sorted(name for name in left_out if name in sys.modules))
"""


def run(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "iop_site.settings"}
    env.setdefault("IOP_GENERATE_SECRET_KEY", "true")
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def test_the_views_are_imported_before_the_first_request() -> None:
    run(CHECK)


def test_the_views_leave_the_schema_generator_and_the_test_clients_unloaded() -> None:
    assert run(WITHOUT_THE_GENERATOR).stdout.split()[-1] == "[]"
