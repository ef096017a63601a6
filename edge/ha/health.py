"""`GET /health/leader` on the public listener: whether this Edge serves the pool, for a load
balancer's health check (`edge.ha`). No token, and nothing in it but the role: 200
``{"role": "leader"}`` from the leader (a single Edge always), 503 ``{"role": "standby"}`` with
``Retry-After`` from a standby."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from edge.ha.role import LEADER, STANDBY, STANDBY_RETRY_AFTER_S
from edge.runtime import get_runtime

LEADER_HEALTH_PATH = "/health/leader"

Send = Callable[[dict[str, Any]], Awaitable[None]]


async def leader_health(scope: dict[str, Any], send: Send) -> None:
    leading = get_runtime().leadership.admitting
    headers = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]
    if scope["method"] not in ("GET", "HEAD"):
        status, body = 405, {"detail": f"Use GET for {LEADER_HEALTH_PATH}."}
        headers.append((b"allow", b"GET, HEAD"))
    elif leading:
        status, body = 200, {"role": LEADER}
    else:
        status, body = 503, {"role": STANDBY}
        headers.append((b"retry-after", str(STANDBY_RETRY_AFTER_S).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    payload = b"" if scope["method"] == "HEAD" else json.dumps(body).encode()
    await send({"type": "http.response.body", "body": payload})
