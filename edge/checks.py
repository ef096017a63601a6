"""System checks for how the Edge is deployed (they run with every manage.py command)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Tags, Warning, register

# The settings that keep the admin login safe behind a TLS front; empty, False, 0 or None is unset.
TLS_SETTINGS = (
    "CSRF_TRUSTED_ORIGINS",
    "SECURE_PROXY_SSL_HEADER",
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    "SECURE_HSTS_SECONDS",
)


@register(Tags.security)
def tls_settings_check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn when a production Edge (DEBUG off) has none of the TLS front's settings made."""
    if settings.DEBUG:
        return []
    unset = [name for name in TLS_SETTINGS if not getattr(settings, name, None)]
    if not unset:
        return []
    return [
        Warning(
            f"Not set with DEBUG off: {', '.join(unset)}. Served over plain HTTP, admin "
            "passwords and session cookies cross the network readable, and behind a TLS front "
            "the admin login fails its CSRF check.",
            hint=(
                "Behind a TLS front set IOP_BEHIND_TLS_PROXY=true, CSRF_TRUSTED_ORIGINS="
                "https://<host> and SECURE_HSTS_SECONDS; an Edge reached only over loopback can "
                "silence this with IOP_SILENCED_SYSTEM_CHECKS=edge.W001."
            ),
            id="edge.W001",
        )
    ]


@register(Tags.staticfiles)
def static_files_check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn when the admin's static files were never collected: with hashed names, every admin
    page needs the manifest `collectstatic` writes, and answers 500 without it."""
    manifest = Path(settings.STATIC_ROOT) / "staticfiles.json"
    if manifest.exists():
        return []
    return [
        Warning(
            f"The static files are not collected ({manifest} is missing): every admin page "
            "will answer 500.",
            hint="Run `python manage.py collectstatic --noinput` (`make setup` does).",
            id="edge.W002",
        )
    ]
