"""IOP Edge settings. The environment is read here only, through django-environ."""

from __future__ import annotations

import secrets
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from nodes import wire
from nodes.sessions import DEFAULT_MAX_RUN_OUTPUT_BYTES

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env(
    DEBUG=(bool, False),
    ALLOWED_HOSTS=(list, ["127.0.0.1", "localhost", "[::1]"]),
    IOP_VAR_DIR=(str, str(BASE_DIR / "var")),
    IOP_CONFIG=(str, str(BASE_DIR / "configs" / "edge.yaml")),
    LOG_LEVEL=(str, "INFO"),
)

VAR_DIR = Path(env("IOP_VAR_DIR"))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def _development_secret_key() -> str:
    """A key generated once into var/, so sessions survive restarts without a key in git."""
    key_file = VAR_DIR / "secret_key"
    if not key_file.exists():
        key_file.write_text(secrets.token_urlsafe(50))
        key_file.chmod(0o600)
    return key_file.read_text().strip()


SECRET_KEY = env.str("SECRET_KEY", default="") or _development_secret_key()
DEBUG = env("DEBUG")
ALLOWED_HOSTS = env("ALLOWED_HOSTS")

# The Edge config file this process serves (`run_edge --config` overrides it).
IOP_CONFIG = env("IOP_CONFIG")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "channels",
    "edge",
    "nodes",
    "providers",
    "refresh",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "iop_site.middleware.ListenerURLConfMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "iop_site.urls"
ASGI_APPLICATION = "iop_site.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'iop_edge.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Writes come from several threads (admin, metering): wait for the lock instead of failing,
    # and use WAL so a metering batch commits without an fsync per transaction. Transactions
    # take the write lock when they begin: a deferred one that reads first (a refresh's mirror
    # sync) cannot upgrade once another writer has committed since, and SQLite fails it at once
    # with "database is locked" instead of waiting out the timeout.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        timeout=20,
        init_command="PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        transaction_mode="IMMEDIATE",
    )

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"

# One Edge process owns dispatch, so no channel layer is needed (DESIGN §9 for scaling out).
CHANNEL_LAYERS: dict[str, dict] = {}
# Edge -> Node pings; a Node silent for three intervals is dropped, so a frozen one within seconds.
IOP_NODE_PING_INTERVAL_S = env.float("IOP_NODE_PING_INTERVAL_S", default=2.0)
IOP_NODE_HELLO_TIMEOUT_S = env.float("IOP_NODE_HELLO_TIMEOUT_S", default=10.0)
IOP_RUN_TIMEOUT_S = env.float("IOP_RUN_TIMEOUT_S", default=600.0)
IOP_REFRESH_ACK_TIMEOUT_S = env.float("IOP_REFRESH_ACK_TIMEOUT_S", default=10.0)
# The sizes (docs/api.md, "Limits"): a request body travels to its Node in one run.request, so
# its limit may be lowered but not raised past what the wire carries.
IOP_MAX_BODY_BYTES = env.int("IOP_MAX_BODY_BYTES", default=wire.MAX_BODY_BYTES)
if not 0 < IOP_MAX_BODY_BYTES <= wire.MAX_BODY_BYTES:
    raise ImproperlyConfigured(
        f"IOP_MAX_BODY_BYTES must be between 1 and {wire.MAX_BODY_BYTES}, got {IOP_MAX_BODY_BYTES}"
    )
IOP_MAX_RUN_OUTPUT_BYTES = env.int("IOP_MAX_RUN_OUTPUT_BYTES", default=DEFAULT_MAX_RUN_OUTPUT_BYTES)
if IOP_MAX_RUN_OUTPUT_BYTES <= 0:
    raise ImproperlyConfigured(
        f"IOP_MAX_RUN_OUTPUT_BYTES must be a positive byte count, got {IOP_MAX_RUN_OUTPUT_BYTES}"
    )
IOP_DRAIN_TIMEOUT_S = env.float("IOP_DRAIN_TIMEOUT_S", default=30.0)

REST_FRAMEWORK: dict[str, object] = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "IOP Edge operator API",
    "DESCRIPTION": "Loopback operator surface: config refresh dry-run and apply.",
    "VERSION": "1",
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL")},
}
