"""Active health: an upstream whose `GET /models` fails leaves the pool, and comes back."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tests.e2e.harness import echo_config
from tests.e2e.nodes_support import chat_body, client_headers, status, two_ports, wait_status

COMPLETION = {
    "id": "chatcmpl-up",
    "object": "chat.completion",
    "created": 0,
    "model": "up",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "up"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


class ToggleHandler(BaseHTTPRequestHandler):
    server: ToggleServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._json(200 if self.server.healthy else 500, {"object": "list", "data": []})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self._json(200, COMPLETION)

    def _json(self, status_code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status_code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class ToggleServer(ThreadingHTTPServer):
    daemon_threads = True
    healthy = True


@pytest.fixture(scope="module")
def upstream() -> Iterator[ToggleServer]:
    server = ToggleServer(("127.0.0.1", 0), ToggleHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()


def provider_health(healthy: bool):
    return lambda state: state["providers"]["up-1"]["healthy"] is healthy


def test_the_pool_follows_the_upstreams_health(tokens, edge_factory, node_factory, upstream):
    adapter = {
        "id": "up",
        "type": "openai_http",
        "base_url": f"http://127.0.0.1:{upstream.server_address[1]}/v1",
        "health_interval_s": 0.2,
    }
    config = echo_config(
        tokens,
        *two_ports(),
        adapters=[adapter],
        providers=[{"id": "up-1", "adapter": "up", "served_models": ["up"], "capacity": 2}],
        models=[{"id": "up", "providers": {"up-1": "up"}}],
    )
    edge = edge_factory(config)
    node_factory(edge, "node-a")
    wait_status(edge, lambda s: s["nodes"].get("node-a", {}).get("ready"), "node-a ready")
    url = edge.completions_url
    assert (
        httpx.post(url, headers=client_headers(tokens), json=chat_body("up", "hi")).status_code
        == 200
    )

    upstream.healthy = False
    wait_status(edge, provider_health(False), "the provider to turn unhealthy")
    refused = httpx.post(url, headers=client_headers(tokens), json=chat_body("up", "hi"))
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "no_provider_available"
    assert refused.headers["retry-after"]

    upstream.healthy = True
    wait_status(edge, provider_health(True), "the provider to recover")
    assert (
        httpx.post(url, headers=client_headers(tokens), json=chat_body("up", "hi")).status_code
        == 200
    )
    assert status(edge)["providers"]["up-1"]["in_flight"] == 0
