"""Formats of identifiers, addresses and hashes in the config."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from nodes.wire.node_config import url_for_message

ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
ID_EXPECTED = "1-63 characters of a-z, 0-9, '.', '_', '-', starting with a letter or digit"
MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}")
MODEL_ID_EXPECTED = "1-128 characters of A-Z, a-z, 0-9, '.', '_', ':', '/', '@', '+', '-'"
REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,127}")
REF_EXPECTED = MODEL_ID_EXPECTED
SERVED_NAME = re.compile(r"[^\s\x00-\x1f]{1,256}")
SERVED_NAME_EXPECTED = "1-256 characters without spaces"
LABEL = re.compile(r"[^\x00-\x1f]{1,64}")
LABEL_EXPECTED = "1-64 printable characters"
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
ENV_NAME_EXPECTED = "an environment variable name such as VLLM_API_KEY"
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
SHA256_EXPECTED = "64 lowercase hex characters (a sha256 digest)"


def listen_problem(value: str) -> str | None:
    """Why ``value`` is not a ``host:port`` address, or None when it is one.

    A malformed value is not echoed: it may be something pasted into the wrong field.
    """
    host, sep, port = value.rpartition(":")
    if not sep or not host:
        return "must be host:port, such as 127.0.0.1:8000"
    if not re.fullmatch(r"[0-9]{1,5}", port) or not 1 <= int(port) <= 65535:
        return "port must be 1-65535"
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252})", host):
            return "host must be an IP address or a hostname"
    return None


def listen_host(value: str) -> str:
    host = value.rpartition(":")[0]
    return host[1:-1] if host.startswith("[") else host


def is_loopback(value: str) -> bool:
    host = listen_host(value)
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_problem(value: str) -> str | None:
    """Why ``value`` is not a usable http(s) base URL, or None.

    Messages name the URL without its userinfo, query or fragment (they may hold a key), and
    not at all when it is no http(s) URL (it may be a key pasted into the wrong field).
    """
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 -- raises ValueError on a bad port
    except ValueError:
        return "must be an http(s) URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http(s) URL"
    if parts.username or parts.password:
        return "must not carry credentials; name an environment variable with api_key_env"
    if parts.query or parts.fragment:
        return f"must not have a query or fragment (got {url_for_message(value)} with one)"
    return None


def origin_problem(value: str) -> str | None:
    """Why ``value`` is not a browser origin (``scheme://host[:port]``, or ``*``), or None."""
    if value == "*":
        return None
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 -- raises ValueError on a bad port
    except ValueError:
        return "must be an origin such as https://app.example.com, or *"
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.username
        or parts.password
        or parts.path
        or parts.query
        or parts.fragment
    ):
        return "must be an origin such as https://app.example.com (no path), or *"
    return None


def normalize_url(value: str) -> str:
    return value.rstrip("/")
