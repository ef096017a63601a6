"""A refresh that adds a provider under a running Node: runs reach it only with its config.

The Edge swaps its snapshot and writes `config.refresh` to the Node before any other run is
sent, so a run routed to the new provider always arrives after the Node's new registry.
"""

from __future__ import annotations

import asyncio

import httpx
import yaml

from tests.e2e.harness import echo_config
from tests.e2e.nodes_support import chat_body, client_headers, two_ports, wait_node_ready

BASE = {"id": "p-1", "adapter": "echo", "served_models": ["echo-small"], "capacity": 8}
ADDED = {**BASE, "id": "p-new", "served_models": ["echo-small", "echo-new"], "priority": 1}


def config(tokens, ports, added: bool) -> dict:
    providers = [BASE, ADDED] if added else [BASE]
    routes = {"p-1": "echo-small", **({"p-new": "echo-new"} if added else {})}
    return echo_config(
        tokens, *ports, providers=providers, models=[{"id": "echo", "providers": routes}]
    )


async def test_runs_never_reach_a_provider_before_its_node_has_it(
    tokens, edge_factory, node_factory
) -> None:
    ports = two_ports()
    edge = edge_factory(config(tokens, ports, added=False))
    node_factory(edge, "node-a")
    wait_node_ready(edge, "node-a")
    refresh_url = f"http://127.0.0.1:{edge.admin_port}/refresh"
    statuses: list[int] = []
    providers: set[str] = set()
    stop = asyncio.Event()

    async def traffic(client: httpx.AsyncClient) -> None:
        while not stop.is_set():
            reply = await client.post(
                "/v1/chat/completions", headers=client_headers(tokens), json=chat_body("echo", "x")
            )
            statuses.append(reply.status_code)
            providers.add(reply.headers.get("x-iop-provider", "?"))

    async with httpx.AsyncClient(base_url=edge.base_url, timeout=30) as client:
        workers = [asyncio.create_task(traffic(client)) for _ in range(8)]
        async with httpx.AsyncClient(timeout=30, headers=edge.operator_headers()) as operator:
            for round_index in range(10):
                candidate = yaml.safe_dump(config(tokens, ports, added=round_index % 2 == 0))
                reply = await operator.post(
                    refresh_url, json={"mode": "apply", "config_yaml": candidate}
                )
                assert reply.json()["status"] == "applied", reply.text
                assert reply.json()["node_pushes"] == [
                    {"node": "node-a", "status": "acked", "error": None}
                ]
        stop.set()
        await asyncio.gather(*workers)

    assert statuses and set(statuses) == {200}
    assert providers == {"p-1", "p-new"}
