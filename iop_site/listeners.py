"""Which listener a request came in on, and what each listener serves.

- public (`edge.listen`): the OpenAI API (unless `openai.listen` is set), the Node websocket and
  the admin UI;
- operator (`edge.admin_listen`, loopback): the operator API (`edge.operator_api.urls`):
  `POST /refresh`, `GET /status` and their OpenAPI schema, nothing else;
- OpenAI (`openai.listen`, when set): the OpenAI API only.
"""

from __future__ import annotations

from typing import Any

from edge.config.formats import listen_host
from edge.runtime import get_runtime

PUBLIC, OPERATOR, OPENAI = "public", "operator", "openai"


def _port(listen: str | None) -> int | None:
    return int(listen.rpartition(":")[2]) if listen else None


def listener_of(scope: dict[str, Any]) -> str:
    """The listener of a request, by the local port it arrived on."""
    server = scope.get("server") or (None, None)
    return listener_of_port(server[1])


def listener_of_port(port: int | None) -> str:
    config = get_runtime().config
    if port == _port(config.edge.admin_listen):
        return OPERATOR
    if port is not None and port == _port(config.openai.listen):
        return OPENAI
    return PUBLIC


def serves_openai_api(listener: str) -> bool:
    return listener == (OPENAI if get_runtime().config.openai.listen else PUBLIC)


# Twisted listens with a backlog of 50: a burst of new connections overflows it and the kernel
# retries the handshakes only after 1 s and 3 s.
LISTEN_BACKLOG = 1024


def daphne_endpoint(listen: str) -> str:
    """A `host:port` as a Twisted endpoint string (IPv6 colons escaped)."""
    host, port = listen_host(listen), _port(listen)
    kind = "tcp6" if ":" in host else "tcp"
    interface = host.replace(":", "\\:")
    return f"{kind}:port={port}:interface={interface}:backlog={LISTEN_BACKLOG}"
