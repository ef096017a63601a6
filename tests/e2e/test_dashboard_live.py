"""The live dashboard's feed on a real Edge: a Node's row follows the Node as it comes and dies."""

from __future__ import annotations

from typing import Any

import httpx

from bench.admin_session import create_staff, log_in
from edge.dashboard.data import rows_as_dicts
from nodes.agent.session import AGENT_VERSION
from tests.e2e.harness import echo_config, wait_until

STAFF, PASSWORD = "operator", "dashboard-password-1"
FEED = "/admin/dashboard/data.json"


def node_a(client: httpx.Client) -> dict[str, Any]:
    response = client.get(FEED)
    response.raise_for_status()
    (node,) = [n for n in rows_as_dicts(response.json()["nodes"]) if n["id"] == "node-a"]
    return node


def test_a_nodes_row_turns_not_connected_when_the_node_is_killed(openai_stack_factory) -> None:
    stack = openai_stack_factory(echo_config)
    create_staff(stack.edge.env, STAFF, PASSWORD)
    node = stack.start_node("node-a")

    with httpx.Client(base_url=stack.edge.base_url, timeout=30) as client:
        assert client.get(FEED).status_code == 403  # not logged in yet
        log_in(client, STAFF, PASSWORD)
        ready = wait_until(
            lambda: (row := node_a(client))["ready"] and row, timeout=30, what="node-a ready"
        )
        assert ready["connected"] and ready["agent_version"] == AGENT_VERSION
        assert ready["acked_revision"] == client.get(FEED).json()["revision"]
        assert ready["connected_since"] > 0

        node.kill()

        gone = wait_until(
            lambda: not (row := node_a(client))["connected"] and row,
            timeout=30,
            what="node-a not connected",
        )
        assert not gone["ready"] and gone["agent_version"] is None
