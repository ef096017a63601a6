"""An Edge with `edge.ha` whose lock another session holds is a standby on every surface; once
the lock is free it takes over with the cluster's config from the database, not its own file,
and applies refreshes the next leader will serve."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import yaml
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from edge.config import load_config_text
from edge.ha.cluster import lock_conninfo
from edge.ha.role import lock_key
from edge.mirror import import_config
from edge.models import ConfigRevision
from refresh.models import RefreshRecord
from tests.e2e.harness import Tokens, echo_config, wait_until
from tests.ha.conftest import HAEdge, HANode

pytestmark = pytest.mark.django_db(transaction=True)


def ha_config(tokens: Tokens, capacity: int) -> dict[str, Any]:
    config = echo_config(
        tokens,
        0,
        0,
        providers=[
            {
                "id": "echo-1",
                "adapter": "echo",
                "served_models": ["echo-small"],
                "capacity": capacity,
            }
        ],
    )
    # The file's own listeners: each test Edge overrides them with --listen/--admin-listen.
    config["edge"].update(listen="127.0.0.1:18000", admin_listen="127.0.0.1:18001", ha=True)
    return config


@pytest.fixture
def held_lock(pg_url: str) -> Iterator[psycopg.Connection[Any]]:
    """Another session holds the leader lock of `edge-test` until the test closes it."""
    connection = psycopg.connect(**lock_conninfo(), autocommit=True)
    connection.execute("SELECT pg_advisory_lock(%s)", (lock_key("edge-test"),))
    yield connection
    connection.close()


def chat(edge: HAEdge, tokens: Tokens) -> httpx.Response:
    return httpx.post(
        edge.completions_url,
        headers={"Authorization": f"Bearer {tokens.client('app-1')}"},
        json={"model": "echo", "messages": [{"role": "user", "content": "hello"}]},
        timeout=30,
    )


def metric(edge: HAEdge, name: str) -> str:
    text = httpx.get(
        f"{edge.operator_url}/metrics", headers=edge.operator_headers(), timeout=10
    ).text
    return next(line for line in text.splitlines() if line.startswith(name + "{"))


def test_a_standby_serves_nothing_and_says_so_then_takes_over_from_the_database(
    tmp_path: Path, pg_url: str, held_lock: psycopg.Connection[Any], processes: list[Any]
) -> None:
    tokens = Tokens()
    local = ha_config(tokens, capacity=4)  # the Edge's own file: stale
    cluster = ha_config(tokens, capacity=6)  # what the cluster last applied
    cluster_text = yaml.safe_dump(cluster, sort_keys=False)
    cluster_config = load_config_text(cluster_text)
    import_config(cluster_config, cluster_text, source="an earlier leader")
    edge = HAEdge(tmp_path / "edge", local, pg_url, "edge")
    processes.append(edge)
    edge.start()

    # -- a standby: status and metrics answer; the OpenAI API, Nodes and refreshes are refused
    status = edge.status()
    assert status is not None
    assert (status["role"], status["ha"]["terms"]) == ("standby", 0)
    assert metric(edge, "iop_edge_leader") == 'iop_edge_leader{edge_id="edge-test"} 0.0'
    refused = chat(edge, tokens)
    assert refused.status_code == 503
    assert refused.headers["Retry-After"] == "1"
    assert refused.json()["error"]["code"] == "edge_standby"
    with (
        connect(edge.ws_url, open_timeout=10) as websocket,
        pytest.raises(ConnectionClosed) as closed,
    ):
        websocket.recv(timeout=10)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4503  # the Node logs it as "edge is a standby"
    refresh = httpx.post(
        f"{edge.operator_url}/refresh",
        headers=edge.operator_headers(),
        json={"mode": "dry_run"},
        timeout=30,
    )
    assert refresh.status_code == 503
    assert refresh.json()["code"] == "edge_standby"
    assert ConfigRevision.objects.get(active=True).revision == cluster_config.revision
    health = httpx.get(f"{edge.base_url}/health/leader", timeout=10)
    assert (health.status_code, health.json()) == (503, {"role": "standby"})

    # -- the lock comes free: the Edge leads with the cluster's revision, not its file's
    held_lock.close()
    wait_until(lambda: edge.role() == "leader", timeout=30, what="the takeover")
    status = edge.status()
    assert status is not None
    assert status["revision"] == cluster_config.revision
    assert status["providers"]["echo-1"]["capacity"] == 6
    assert status["ha"]["terms"] == 1
    assert metric(edge, "iop_edge_leader") == 'iop_edge_leader{edge_id="edge-test"} 1.0'
    health = httpx.get(f"{edge.base_url}/health/leader", timeout=10)
    assert (health.status_code, health.json()) == (200, {"role": "leader"})
    assert load_config_text(edge.config_path.read_text()).revision == cluster_config.revision
    node = HANode(edge.workdir, [edge], "node-a", tokens.node("node-a"))
    processes.append(node)
    node.start()
    wait_until(
        lambda: (edge.status() or {}).get("nodes", {}).get("node-a", {}).get("ready"),
        what="the Node to serve",
    )
    assert chat(edge, tokens).json()["choices"][0]["message"]["content"] == "echo: hello"

    # -- a refresh applied on the leader is what the database (and the next leader) holds
    candidate = ha_config(tokens, capacity=8)
    applied = httpx.post(
        f"{edge.operator_url}/refresh",
        headers=edge.operator_headers(),
        json={"mode": "apply", "config_yaml": yaml.safe_dump(candidate)},
        timeout=30,
    )
    assert applied.json()["status"] == "applied", applied.text
    active = ConfigRevision.objects.get(active=True)
    assert active.revision == applied.json()["candidate_revision"]
    assert load_config_text(active.yaml_text).node("node-a").providers[0].capacity == 8
    assert RefreshRecord.objects.filter(mode="apply", status="applied").count() == 1
