"""`manage.py run_edge` with uvicorn also serving the OpenAI API, in the same process and loop.

For `bench/openai_server_bench.py` only: it measures whether another ASGI server, sharing the
Edge's runtime and event loop, serves the OpenAI listener faster than daphne. uvicorn (with
httptools) is not a dependency of the project; this needs ``pip install uvicorn httptools``.

    python bench/uvicorn_edge.py PORT run_edge --config edge.yaml
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    port, command = int(sys.argv[1]), sys.argv[2:]
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "iop_site.settings")
    from iop_site import event_loop

    event_loop.install(["manage.py", *command], os.environ)
    import django

    django.setup()
    import daphne.server
    from django.core.management import execute_from_command_line
    from twisted.internet import reactor

    serve_daphne = daphne.server.Server.run

    def run(server: Any) -> None:
        reactor.callWhenRunning(serve_uvicorn, reactor, port)
        serve_daphne(server)

    daphne.server.Server.run = run  # type: ignore[method-assign]
    execute_from_command_line(["manage.py", *command])


def serve_uvicorn(reactor: Any, port: int) -> None:
    import uvicorn

    from edge.openai_api.app import openai_app

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":  # the runtime is run_edge's, already installed
            await openai_app(scope, receive, send)

    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        loop="none",  # the loop daphne's reactor already runs on
        http="httptools",
        lifespan="off",
        access_log=False,
        log_level="warning",
    )
    # serve() would take over the process's signals, which run_edge drains on.
    reactor._asyncioEventloop.create_task(uvicorn.Server(config)._serve())


if __name__ == "__main__":
    main()
