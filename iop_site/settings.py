"""IOP Edge settings. The environment is read here only, through django-environ."""

from __future__ import annotations

import os
import secrets
import warnings
from datetime import timedelta
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from edge.config.yaml_source import MAX_CONFIG_BYTES
from iop_site.postgres_fields import import_only_for_postgres
from nodes import wire
from nodes.sessions import DEFAULT_MAX_RUN_OUTPUT_BYTES

# Everything this process writes (database, key, tokens, records) is its own: 0600 files, 0700
# directories. Settings are the first thing every Edge entry point imports (manage.py, daphne,
# pytest), and the Node run_local spawns inherits the mask.
os.umask(0o077)

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env(
    DEBUG=(bool, False),
    ALLOWED_HOSTS=(list, ["127.0.0.1", "localhost", "[::1]"]),
    IOP_VAR_DIR=(str, str(BASE_DIR / "var")),
    IOP_CONFIG=(str, str(BASE_DIR / "configs" / "edge.yaml")),
    LOG_LEVEL=(str, "INFO"),
)

VAR_DIR = Path(env("IOP_VAR_DIR"))
VAR_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
# A var/ made before the mask was set (0755) is closed too: nothing under it is anyone else's.
VAR_DIR.chmod(0o700)


def _secret(name: str) -> str:
    """``name`` from the environment, or the content of the file ``<name>_FILE`` names."""
    value, path = env.str(name, default=""), env.str(f"{name}_FILE", default="")
    if value and path:
        raise ImproperlyConfigured(f"Set {name} or {name}_FILE, not both")
    if not path:
        return value
    try:
        value = Path(path).read_text(encoding="utf-8").strip()
    except OSError as error:
        raise ImproperlyConfigured(f"{name}_FILE: cannot read {path} ({error.strerror})") from None
    if not value:
        raise ImproperlyConfigured(f"{name}_FILE: {path} is empty")
    return value


def _generated_secret_key(key_file: Path) -> str:
    """A key generated once into ``key_file``, 0600 from its creation on (no moment another user
    could open it); of two first starts at once, both keep the key written first."""
    staging = key_file.with_name(f".{key_file.name}.{os.getpid()}")
    descriptor = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(secrets.token_urlsafe(50))
    try:
        os.link(staging, key_file)  # atomic: readers never see a half-written key
    except FileExistsError:
        pass
    finally:
        staging.unlink()
    return key_file.read_text(encoding="utf-8").strip()


DEBUG = env("DEBUG")
ALLOWED_HOSTS = env("ALLOWED_HOSTS")

# The key is given (SECRET_KEY or SECRET_KEY_FILE), or one generated earlier into var/ is read;
# generating one takes DEBUG or an explicit IOP_GENERATE_SECRET_KEY (`make` sets it), so a
# production start without its key fails instead of silently signing with a fresh one.
_SECRET_KEY_FILE = VAR_DIR / "secret_key"
SECRET_KEY = _secret("SECRET_KEY")
if not SECRET_KEY and _SECRET_KEY_FILE.exists():
    SECRET_KEY = _SECRET_KEY_FILE.read_text(encoding="utf-8").strip()
if not SECRET_KEY:
    if not (DEBUG or env.bool("IOP_GENERATE_SECRET_KEY", default=False)):
        raise ImproperlyConfigured(
            "SECRET_KEY is not set: set SECRET_KEY or SECRET_KEY_FILE, or "
            f"IOP_GENERATE_SECRET_KEY=true to generate one into {_SECRET_KEY_FILE}"
        )
    SECRET_KEY = _generated_secret_key(_SECRET_KEY_FILE)

# Behind a TLS front (docs/operations.md, "Security"): the proxy says the request came over
# https, cookies go out Secure only, browsers are told to stay on https.
IOP_BEHIND_TLS_PROXY = env.bool("IOP_BEHIND_TLS_PROXY", default=False)
if IOP_BEHIND_TLS_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=IOP_BEHIND_TLS_PROXY)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=IOP_BEHIND_TLS_PROXY)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0)
# Checks an operator silences on purpose, e.g. edge.W001 for a plain-HTTP admin on loopback.
# axes.W006 objects to a lockout without the address in it, which is the choice made below.
SILENCED_SYSTEM_CHECKS = ["axes.W006", *env.list("IOP_SILENCED_SYSTEM_CHECKS", default=[])]

# Admin login throttling (django-axes): a username with this many failed logins is refused,
# the right password included, for the cool-off. Per username, not per address: behind a proxy
# every caller has the proxy's address.
AXES_FAILURE_LIMIT = env.int("IOP_ADMIN_LOGIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.float("IOP_ADMIN_LOGIN_LOCKOUT_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = ["username"]
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False  # no banner on every manage.py command; lockouts are still logged
if AXES_FAILURE_LIMIT <= 0 or AXES_COOLOFF_TIME.total_seconds() <= 0:
    raise ImproperlyConfigured(
        "IOP_ADMIN_LOGIN_FAILURE_LIMIT and IOP_ADMIN_LOGIN_LOCKOUT_MINUTES must be positive"
    )

# The Edge config file this process serves (`run_edge --config` overrides it).
IOP_CONFIG = env("IOP_CONFIG")
# The operator API's bearer token, created (mode 0600) on the Edge's first start.
IOP_OPERATOR_TOKEN_FILE = Path(
    env.str("IOP_OPERATOR_TOKEN_FILE", default=str(VAR_DIR / "bootstrap" / "operator-token"))
)

INSTALLED_APPS = [
    "daphne",
    # Before the admin: its templates (admin/base_site.html) override the admin's own.
    "edge",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "channels",
    "nodes",
    "providers",
    "refresh",
    "axes",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "iop_site.static_files.PublicStaticFilesMiddleware",
    "iop_site.middleware.ListenerURLConfMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it answers a locked-out login.
    "axes.middleware.AxesMiddleware",
]

AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses a locked-out login before the check
    "django.contrib.auth.backends.ModelBackend",
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


def _database(url: str) -> dict:
    """The database ``url`` names; refused without quoting it (it may hold a password)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # django-environ's warning quotes the whole URL
        config = env.db_url_config(url)
    if not config.get("ENGINE"):
        raise ImproperlyConfigured(
            "DATABASE_URL (or the file DATABASE_URL_FILE names) is no database URL this Edge "
            "knows: use postgres://user:password@host:port/name or sqlite:///path"
        )
    return config


DATABASES = {
    "default": _database(_secret("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'iop_edge.sqlite3'}")
}
import_only_for_postgres(DATABASES["default"]["ENGINE"])
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
# The admin shows every time with its zone (iop_site/formats).
FORMAT_MODULE_PATH = ["iop_site.formats"]

# Static files (the admin's CSS and JS) are the code's, not an Edge's: collected once per
# checkout (`make setup`), compressed and with hashed names, shared by every var dir, served by
# WhiteNoise on the public listener. IOP_STATIC_ROOT moves them where the checkout is read-only.
STATIC_URL = "static/"
STATIC_ROOT = Path(env.str("IOP_STATIC_ROOT", default=str(BASE_DIR / "staticfiles")))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

# One Edge process owns dispatch, so no channel layer is needed (DESIGN §9 for scaling out).
CHANNEL_LAYERS: dict[str, dict] = {}
# Edge -> Node pings; a Node silent for three intervals is dropped, so a frozen one within seconds.
IOP_NODE_PING_INTERVAL_S = env.float("IOP_NODE_PING_INTERVAL_S", default=2.0)
IOP_NODE_HELLO_TIMEOUT_S = env.float("IOP_NODE_HELLO_TIMEOUT_S", default=10.0)
IOP_RUN_TIMEOUT_S = env.float("IOP_RUN_TIMEOUT_S", default=600.0)
IOP_REFRESH_ACK_TIMEOUT_S = env.float("IOP_REFRESH_ACK_TIMEOUT_S", default=10.0)
# Planning (parse, validate, classify) runs in a thread; past this it answers `invalid`.
IOP_REFRESH_PLAN_TIMEOUT_S = env.float("IOP_REFRESH_PLAN_TIMEOUT_S", default=30.0)
if IOP_REFRESH_PLAN_TIMEOUT_S <= 0:
    raise ImproperlyConfigured(
        f"IOP_REFRESH_PLAN_TIMEOUT_S must be positive, got {IOP_REFRESH_PLAN_TIMEOUT_S}"
    )
# The sizes (docs/api.md, "Limits"): a request body travels to its Node in one run.request, so
# its limit may be lowered but not raised past what the wire carries.
IOP_MAX_BODY_BYTES = env.int("IOP_MAX_BODY_BYTES", default=wire.MAX_BODY_BYTES)
if not 0 < IOP_MAX_BODY_BYTES <= wire.MAX_BODY_BYTES:
    raise ImproperlyConfigured(
        f"IOP_MAX_BODY_BYTES must be between 1 and {wire.MAX_BODY_BYTES}, got {IOP_MAX_BODY_BYTES}"
    )
# The operator API takes a whole config as a JSON string: room for the largest config with its
# line breaks and quotes escaped. Daphne refuses a larger body on that listener before reading it.
DATA_UPLOAD_MAX_MEMORY_SIZE = 2 * MAX_CONFIG_BYTES + 1024 * 1024
# Django's ASGI handler spools a body past this to a file on disk, from the event loop: at 2.5 MB
# (its default) a fleet's refresh wrote megabytes to disk there and held up every request for tens
# of milliseconds. The limit above bounds what is kept in memory instead; nothing here takes files.
FILE_UPLOAD_MAX_MEMORY_SIZE = DATA_UPLOAD_MAX_MEMORY_SIZE
IOP_MAX_RUN_OUTPUT_BYTES = env.int("IOP_MAX_RUN_OUTPUT_BYTES", default=DEFAULT_MAX_RUN_OUTPUT_BYTES)
if IOP_MAX_RUN_OUTPUT_BYTES <= 0:
    raise ImproperlyConfigured(
        f"IOP_MAX_RUN_OUTPUT_BYTES must be a positive byte count, got {IOP_MAX_RUN_OUTPUT_BYTES}"
    )
IOP_DRAIN_TIMEOUT_S = env.float("IOP_DRAIN_TIMEOUT_S", default=30.0)
# Slow clients (docs/operations.md, "Security"): a request must be read whole within this many
# seconds of the connection opening or the previous answer ending; at most this many connections
# open per peer address (0: no cap; the Edge behind a proxy sees one address).
IOP_REQUEST_READ_TIMEOUT_S = env.float("IOP_REQUEST_READ_TIMEOUT_S", default=30.0)
IOP_MAX_CONNECTIONS_PER_PEER = env.int("IOP_MAX_CONNECTIONS_PER_PEER", default=256)
IOP_CAP_LOOPBACK_PEERS = env.bool("IOP_CAP_LOOPBACK_PEERS", default=False)
if IOP_REQUEST_READ_TIMEOUT_S <= 0:
    raise ImproperlyConfigured(
        f"IOP_REQUEST_READ_TIMEOUT_S must be a positive time, got {IOP_REQUEST_READ_TIMEOUT_S}"
    )
if IOP_MAX_CONNECTIONS_PER_PEER < 0:
    raise ImproperlyConfigured(
        "IOP_MAX_CONNECTIONS_PER_PEER must be 0 (no cap) or more, "
        f"got {IOP_MAX_CONNECTIONS_PER_PEER}"
    )

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
