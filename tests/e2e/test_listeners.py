"""Each listener serves only its own surface (docs/operations.md), whichever server serves
`openai.listen` (`openai.server`)."""

from __future__ import annotations

import stat

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.e2e.harness import echo_config, free_port
from tests.e2e.nodes_support import client_headers, two_ports


@pytest.fixture(scope="module")
def edge(tokens, edge_factory, openai_server):
    config = echo_config(tokens, *two_ports())
    config["openai"].update(listen=f"127.0.0.1:{free_port()}", server=openai_server)
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
    operator = edge.operator_headers()

    assert httpx.get(url(edge.admin_port, "/status"), headers=operator).status_code == 200
    assert httpx.get(url(edge.admin_port, "/api/schema/"), headers=operator).status_code == 200
    refresh = httpx.post(
        url(edge.public_port, "/refresh"), json={"mode": "dry_run"}, headers=operator
    )
    assert refresh.status_code == 404
    assert httpx.get(url(openai_port(edge), "/status"), headers=operator).status_code == 404


def test_the_operator_api_needs_the_token_the_edge_created(edge):
    assert stat.S_IMODE(edge.operator_token_file.stat().st_mode) == 0o600
    assert str(edge.operator_token_file) in edge.log()  # where to find it, printed at start

    for headers in ({}, {"Authorization": "Bearer not-the-token"}):
        refused = httpx.post(
            url(edge.admin_port, "/refresh"), json={"mode": "apply"}, headers=headers
        )
        assert refused.status_code == 401
        assert "operator token" in refused.json()["detail"]
        assert httpx.get(url(edge.admin_port, "/status"), headers=headers).status_code == 401


def test_the_operator_api_refuses_what_a_browser_page_could_send(edge):
    """A form post, or any request of another site's page, changes nothing even with the token."""
    operator = edge.operator_headers()
    before = httpx.get(url(edge.admin_port, "/status"), headers=operator).json()["revision"]

    form = httpx.post(url(edge.admin_port, "/refresh"), data={"mode": "apply"}, headers=operator)
    cross_site = httpx.post(
        url(edge.admin_port, "/refresh"),
        json={"mode": "apply"},
        headers={**operator, "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
    )

    assert (form.status_code, form.headers["content-type"]) == (415, "application/json")
    assert cross_site.status_code == 403 and "Cross-site" in cross_site.json()["detail"]
    after = httpx.get(url(edge.admin_port, "/status"), headers=operator).json()["revision"]
    assert after == before


def test_the_ready_line_names_the_openai_server(edge, openai_server):
    served_by = " (uvicorn)" if openai_server == "uvicorn" else ""
    assert f"openai   http://127.0.0.1:{openai_port(edge)}/v1/{served_by}\n" in edge.log()


@pytest.mark.parametrize("listener", ["admin", "openai"])
async def test_the_node_websocket_is_public_only(edge, tokens, listener, openai_server):
    port = edge.admin_port if listener == "admin" else openai_port(edge)
    headers = {"Authorization": f"Bearer {tokens.node('node-a')}", "X-IOP-Node": "node-a"}

    with pytest.raises(InvalidStatus) as refused:
        async with connect(f"ws://127.0.0.1:{port}/ws/node/", additional_headers=headers):
            pass
    # daphne refuses the handshake; uvicorn serves no websockets, and the path is no API's.
    uvicorn_openai = listener == "openai" and openai_server == "uvicorn"
    assert refused.value.response.status_code == (404 if uvicorn_openai else 403)
