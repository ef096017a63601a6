"""ASGI entry point: a Channels ProtocolTypeRouter, routing by listener and path.

`/v1/` and the OpenAI API's paths without it (`/models`, `/chat/completions`, `/completions`,
`/embeddings`, `/responses`) go to the lean OpenAI ASGI app, `/health/leader` (public listener)
answers whether this Edge leads (`edge.ha.health`), `/ws/node/` to the Node consumer,
everything else to Django (the admin UI; the operator API `POST /refresh` and `GET /status`),
each only on the listener that serves it. A websocket to any other path is accepted, then closed
with 4404.
"""

import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "iop_site.settings")
django_asgi_app = get_asgi_application()

# These need Django set up first.
from channels.routing import ProtocolTypeRouter  # noqa: E402

from edge.ha.health import LEADER_HEALTH_PATH, leader_health  # noqa: E402
from edge.openai_api.app import is_api_path, openai_app  # noqa: E402
from edge.startup import ensure_runtime  # noqa: E402
from iop_site.listeners import OPENAI, PUBLIC, listener_of, serves_openai_api  # noqa: E402
from nodes.consumers import NodeConsumer  # noqa: E402

node_websocket = NodeConsumer.as_asgi()
NODE_WEBSOCKET_PATH = "/ws/node/"

NOT_FOUND = b'{"detail": "Not found."}'
# A websocket path nothing serves (close codes mirror HTTP statuses, as the Node protocol's do).
CLOSE_NOT_FOUND = 4404


async def http_router(scope: dict[str, Any], receive: Any, send: Any) -> None:
    ensure_runtime()
    listener = listener_of(scope)
    if scope["path"] == LEADER_HEALTH_PATH and listener == PUBLIC:
        await leader_health(scope, send)  # for load balancers (edge.ha)
        return
    if is_api_path(scope["path"]):
        if serves_openai_api(listener):
            await openai_app(scope, receive, send)
            return
    elif listener != OPENAI:
        await django_asgi_app(scope, receive, send)
        return
    await send(
        {
            "type": "http.response.start",
            "status": 404,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": NOT_FOUND})


async def websocket_router(scope: dict[str, Any], receive: Any, send: Any) -> None:
    ensure_runtime()
    if listener_of(scope) == PUBLIC:
        if scope["path"] == NODE_WEBSOCKET_PATH:
            await node_websocket(scope, receive, send)
            return
        # Accept first, then close: a client only sees a close code after the handshake.
        if (await receive())["type"] == "websocket.connect":
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.close", "code": CLOSE_NOT_FOUND})
        return
    # Refused at the handshake (HTTP 403): no websocket is served on this listener.
    await send({"type": "websocket.close"})


application = ProtocolTypeRouter({"http": http_router, "websocket": websocket_router})
