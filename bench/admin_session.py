"""A staff login to an Edge's admin over HTTP, as a browser makes it (for benchmarks and tests)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
CSRF_FIELD = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def create_staff(env: dict[str, str], username: str, password: str) -> None:
    """A superuser in the database of the Edge whose environment is ``env``."""
    subprocess.run(
        [sys.executable, "manage.py", "createsuperuser", "--noinput", "--username", username],
        cwd=ROOT,
        env={
            **env,
            "DJANGO_SUPERUSER_PASSWORD": password,
            "DJANGO_SUPERUSER_EMAIL": f"{username}@example.com",
        },
        check=True,
        capture_output=True,
        timeout=60,
    )


def log_in(client: httpx.Client, username: str, password: str) -> None:
    """Post the admin's login form with its CSRF cookie and field; ``client`` keeps the session."""
    token = CSRF_FIELD.search(client.get("/admin/login/").text)
    if token is None:
        raise RuntimeError("the admin login page has no CSRF field")
    answer = client.post(
        "/admin/login/?next=/admin/",
        data={"username": username, "password": password, "csrfmiddlewaretoken": token[1]},
    )
    if answer.status_code != 302 or answer.headers["location"] != "/admin/":
        raise RuntimeError(f"admin login refused: {answer.status_code}")
