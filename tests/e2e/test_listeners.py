"""Each listener serves only its own surface (docs/operations.md)."""

from __future__ import annotations

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.e2e.harness import echo_config, free_port
from tests.e2e.nodes_support import client_headers, two_ports


@pytest.fixture(scope="module")
def edge(tokens, edge_factory):
    config = echo_config(tokens, *two_ports())
    config["openai"]["listen"] = f"127.0.0.1:{free_port()}"
    return edge_factory(config)


def url(port: int, path: str) -> str:
    return f"http://127.0.0.1:{port}{path}"


def openai_port(edge) -> int:
    return int(edge.log().split("openai   http://127.0.0.1:")[1].split("/")[0])


def test_the_openai_api_moves_to_its_own_listener(edge, tokens):
    port = openai_port(edge)
    headers = client_headers(tokens)

    assert httpx.get(url(port, "/v1/models"), headers=headers).status_code == 200
    assert httpx.get(url(edge.public_port, "/v1/models"), headers=headers).status_code == 404
    assert httpx.get(url(edge.admin_port, "/v1/models"), headers=headers).status_code == 404


def test_the_admin_ui_is_public_only(edge):
    assert httpx.get(url(edge.public_port, "/admin/login/")).status_code == 200
    assert httpx.get(url(openai_port(edge), "/admin/login/")).status_code == 404
    assert httpx.get(url(edge.admin_port, "/admin/login/")).status_code == 404


def test_the_operator_api_is_on_the_admin_listener_only(edge):
    assert httpx.get(url(edge.admin_port, "/status")).status_code == 200
    assert httpx.get(url(edge.admin_port, "/api/schema/")).status_code == 200
    assert (
        httpx.post(url(edge.public_port, "/refresh"), json={"mode": "dry_run"}).status_code == 404
    )
    assert httpx.get(url(openai_port(edge), "/status")).status_code == 404


@pytest.mark.parametrize("listener", ["admin", "openai"])
async def test_the_node_websocket_is_public_only(edge, tokens, listener):
    port = edge.admin_port if listener == "admin" else openai_port(edge)
    headers = {"Authorization": f"Bearer {tokens.node('node-a')}", "X-IOP-Node": "node-a"}

    with pytest.raises(InvalidStatus) as refused:
        async with connect(f"ws://127.0.0.1:{port}/ws/node/", additional_headers=headers):
            pass
    assert refused.value.response.status_code == 403
