"""The Edge imports its views before it serves: not on the event loop at the first request."""

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


def test_the_views_are_imported_before_the_first_request() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "iop_site.settings"}
    env.setdefault("IOP_GENERATE_SECRET_KEY", "true")
    done = subprocess.run(
        [sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
