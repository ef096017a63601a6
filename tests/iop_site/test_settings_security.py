"""Settings fail loudly: no SECRET_KEY made up in production, secrets from files, TLS settings
from the environment, and a system check that says when a production Edge lacks them."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

# The variables this file's subprocesses start without, unless a test gives them.
CLEARED = (
    "DEBUG",
    "SECRET_KEY",
    "SECRET_KEY_FILE",
    "DATABASE_URL",
    "DATABASE_URL_FILE",
    "IOP_GENERATE_SECRET_KEY",
    "IOP_SILENCED_SYSTEM_CHECKS",
    "IOP_BEHIND_TLS_PROXY",
    "CSRF_TRUSTED_ORIGINS",
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    "SECURE_HSTS_SECONDS",
)


def run(tmp_path: Path, args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in CLEARED}
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env={**base, "IOP_VAR_DIR": str(tmp_path / "var"), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def django_check(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return run(tmp_path, ["manage.py", "check"], **env)


SHOW = (
    "import django, json; django.setup(); from django.conf import settings as s; "
    "print(json.dumps({n: getattr(s, n, None) for n in %r}, default=str))"
)


def settings_of(tmp_path: Path, *names: str, **env: str) -> dict:
    result = run(
        tmp_path,
        ["-c", SHOW % (names,)],
        DJANGO_SETTINGS_MODULE="iop_site.settings",
        **env,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_without_a_key_and_debug_off_the_edge_refuses_to_start(tmp_path) -> None:
    result = django_check(tmp_path)

    assert result.returncode != 0
    assert "SECRET_KEY is not set" in result.stderr
    assert "IOP_GENERATE_SECRET_KEY=true" in result.stderr
    assert not (tmp_path / "var" / "secret_key").exists()


def test_asked_to_it_generates_a_key_once_and_keeps_it(tmp_path) -> None:
    first = settings_of(tmp_path, "SECRET_KEY", IOP_GENERATE_SECRET_KEY="true")
    key_file = tmp_path / "var" / "secret_key"

    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert first["SECRET_KEY"] == key_file.read_text().strip()
    # Generated once: later starts read it, no flag needed.
    assert settings_of(tmp_path, "SECRET_KEY") == first
    assert [p.name for p in key_file.parent.iterdir()] == ["secret_key"]  # no staging file left


def test_debug_generates_a_key_without_being_asked(tmp_path) -> None:
    assert settings_of(tmp_path, "SECRET_KEY", DEBUG="true")["SECRET_KEY"]


def test_secrets_are_read_from_their_file(tmp_path) -> None:
    (tmp_path / "key").write_text("a-key-from-a-file\n")
    database = tmp_path / "elsewhere.sqlite3"
    (tmp_path / "db").write_text(f"sqlite:///{database}\n")

    seen = settings_of(
        tmp_path,
        "SECRET_KEY",
        "DATABASES",
        SECRET_KEY_FILE=str(tmp_path / "key"),
        DATABASE_URL_FILE=str(tmp_path / "db"),
    )

    assert seen["SECRET_KEY"] == "a-key-from-a-file"
    assert seen["DATABASES"]["default"]["NAME"] == str(database)


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"SECRET_KEY": "k", "SECRET_KEY_FILE": "/dev/null"}, "Set SECRET_KEY or SECRET_KEY_FILE"),
        ({"SECRET_KEY_FILE": "/nonexistent/key"}, "SECRET_KEY_FILE: cannot read /nonexistent"),
        ({"SECRET_KEY_FILE": "/dev/null"}, "SECRET_KEY_FILE: /dev/null is empty"),
        ({"SECRET_KEY": "k", "DATABASE_URL_FILE": "/nonexistent/db"}, "DATABASE_URL_FILE"),
    ],
)
def test_an_unusable_secret_file_stops_the_edge_naming_it(tmp_path, env, says) -> None:
    result = django_check(tmp_path, **env)

    assert result.returncode != 0
    assert says in result.stderr


def test_a_file_secret_is_never_echoed(tmp_path) -> None:
    (tmp_path / "db").write_text("not a database url: s3cr3t-password\n")

    result = django_check(tmp_path, SECRET_KEY="k", DATABASE_URL_FILE=str(tmp_path / "db"))

    assert result.returncode != 0
    assert "s3cr3t-password" not in result.stderr + result.stdout


TLS = (
    "SECURE_PROXY_SSL_HEADER",
    "CSRF_TRUSTED_ORIGINS",
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    "SECURE_HSTS_SECONDS",
)


def test_behind_a_tls_proxy_the_settings_follow_the_environment(tmp_path) -> None:
    seen = settings_of(
        tmp_path,
        *TLS,
        SECRET_KEY="k",
        IOP_BEHIND_TLS_PROXY="true",
        CSRF_TRUSTED_ORIGINS="https://edge.example,https://admin.example",
        SECURE_HSTS_SECONDS="31536000",
    )

    assert seen == {
        "SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"],
        "CSRF_TRUSTED_ORIGINS": ["https://edge.example", "https://admin.example"],
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "SECURE_HSTS_SECONDS": 31536000,
    }


def test_by_default_nothing_assumes_tls(tmp_path) -> None:
    seen = settings_of(tmp_path, *TLS, SECRET_KEY="k")

    assert seen == {
        "SECURE_PROXY_SSL_HEADER": None,
        "CSRF_TRUSTED_ORIGINS": [],
        "SESSION_COOKIE_SECURE": False,
        "CSRF_COOKIE_SECURE": False,
        "SECURE_HSTS_SECONDS": 0,
    }


def test_the_login_lockout_follows_the_environment(tmp_path) -> None:
    seen = settings_of(
        tmp_path,
        "AXES_FAILURE_LIMIT",
        "AXES_COOLOFF_TIME",
        SECRET_KEY="k",
        IOP_ADMIN_LOGIN_FAILURE_LIMIT="3",
        IOP_ADMIN_LOGIN_LOCKOUT_MINUTES="2",
    )

    assert seen == {"AXES_FAILURE_LIMIT": 3, "AXES_COOLOFF_TIME": "0:02:00"}


def test_a_lockout_of_zero_stops_the_edge(tmp_path) -> None:
    result = django_check(tmp_path, SECRET_KEY="k", IOP_ADMIN_LOGIN_FAILURE_LIMIT="0")

    assert result.returncode != 0
    assert "IOP_ADMIN_LOGIN_FAILURE_LIMIT" in result.stderr


def test_debug_off_without_tls_settings_warns(tmp_path) -> None:
    result = django_check(tmp_path, SECRET_KEY="k")

    assert result.returncode == 0
    assert "edge.W001" in result.stderr
    for name in TLS:
        assert name in result.stderr


def test_with_the_tls_settings_made_the_check_is_quiet(tmp_path) -> None:
    result = django_check(
        tmp_path,
        SECRET_KEY="k",
        IOP_BEHIND_TLS_PROXY="true",
        CSRF_TRUSTED_ORIGINS="https://edge.example",
        SECURE_HSTS_SECONDS="3600",
    )

    assert result.returncode == 0
    assert "edge.W001" not in result.stderr


def test_an_operator_can_silence_the_tls_warning(tmp_path) -> None:
    result = django_check(tmp_path, SECRET_KEY="k", IOP_SILENCED_SYSTEM_CHECKS="edge.W001")

    assert "edge.W001" not in result.stderr


def test_debug_on_does_not_warn(tmp_path) -> None:
    assert "edge.W001" not in django_check(tmp_path, SECRET_KEY="k", DEBUG="true").stderr


def test_static_files_never_collected_warn_before_the_admin_fails(tmp_path) -> None:
    result = django_check(tmp_path, SECRET_KEY="k", IOP_STATIC_ROOT=str(tmp_path / "static"))

    assert result.returncode == 0
    assert "edge.W002" in result.stderr and "collectstatic" in result.stderr


def test_collected_static_files_do_not_warn(tmp_path) -> None:
    static = tmp_path / "static"
    collected = run(
        tmp_path,
        ["manage.py", "collectstatic", "--noinput", "-v0"],
        SECRET_KEY="k",
        IOP_STATIC_ROOT=str(static),
    )
    assert collected.returncode == 0, collected.stderr

    assert (
        "edge.W002"
        not in django_check(tmp_path, SECRET_KEY="k", IOP_STATIC_ROOT=str(static)).stderr
    )
