"""What a refresh writes, through a real Edge: its plan worker writes the record, the mirror and
the config file of the plan it made (refresh.worker_writes); once that worker is killed, the
Edge plans and writes in its own process."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.fleet_config import fleet_yaml, one_change
from refresh.plan_worker import WARM_FROM_CHARS
from tests.e2e.harness import EdgeProcess, echo_config
from tests.e2e.nodes_support import two_ports, wait_node_ready

FLEET_NODES = 350  # a config over WARM_FROM_CHARS, a dry run over WORKER_PARSES_FROM_BYTES
PROVIDER = {"id": "p-1", "adapter": "echo", "served_models": ["echo-small"], "capacity": 2}


def config(tokens: Any, ports: tuple[int, int], capacity: int) -> dict[str, Any]:
    return echo_config(
        tokens,
        *ports,
        providers=[{**PROVIDER, "capacity": capacity}],
        models=[{"id": "echo", "providers": {"p-1": "echo-small"}}],
    )


def plan_workers(edge: EdgeProcess) -> list[int]:
    """The Edge's child processes that multiprocessing spawned: its plan worker."""
    assert edge.process is not None
    children = Path(f"/proc/{edge.process.pid}/task/{edge.process.pid}/children").read_text()
    return [
        int(pid)
        for pid in children.split()
        if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]


def refresh(edge: EdgeProcess, body: dict[str, Any]) -> dict[str, Any]:
    reply = httpx.post(
        f"http://127.0.0.1:{edge.admin_port}/refresh",
        json=body,
        headers=edge.operator_headers(),
        timeout=60,
    )
    return reply.json()


def record(edge: EdgeProcess, refresh_id: str) -> dict[str, Any]:
    with edge.db() as db:
        row = db.execute(
            "SELECT mode, status, reason, candidate_yaml, result FROM refresh_refreshrecord "
            "WHERE refresh_id = ?",
            [refresh_id],
        ).fetchone()
    assert row is not None, f"no record of {refresh_id}"
    mode, status, reason, candidate_yaml, result = row
    return {
        "mode": mode,
        "status": status,
        "reason": reason,
        "candidate_yaml": candidate_yaml,
        "result": json.loads(result),
    }


def active_revision(edge: EdgeProcess) -> str:
    with edge.db() as db:
        [(revision,)] = db.execute(
            "SELECT revision FROM edge_configrevision WHERE active"
        ).fetchall()
    return revision


def test_an_apply_is_written_where_it_was_planned(tokens, edge_factory, node_factory) -> None:
    ports = two_ports()
    edge = edge_factory(config(tokens, ports, capacity=2))
    node_factory(edge, "node-a")
    wait_node_ready(edge, "node-a")
    started_with = edge.config_path.read_text()
    candidate = yaml.safe_dump(config(tokens, ports, capacity=3))
    assert plan_workers(edge) == []  # a small config's worker starts at the first refresh

    dry_run = refresh(edge, {"mode": "dry_run", "config_yaml": candidate, "reason": "look first"})
    applied = refresh(edge, {"mode": "apply", "config_yaml": candidate, "reason": "more room"})

    assert len(plan_workers(edge)) == 1  # the plans were made there
    assert dry_run["status"] == "ok" and applied["status"] == "applied", applied
    looked = record(edge, dry_run["refresh_id"])
    assert (looked["mode"], looked["status"], looked["reason"]) == ("dry_run", "ok", "look first")
    assert looked["candidate_yaml"] == candidate and looked["result"] == dry_run
    written = record(edge, applied["refresh_id"])
    assert (written["status"], written["reason"]) == ("applied", "more room")
    assert written["result"] == applied  # with the Node's answer, written after the push
    assert written["result"]["node_pushes"] == [
        {"node": "node-a", "status": "acked", "error": None}
    ]
    assert active_revision(edge) == applied["candidate_revision"]
    assert edge.config_path.read_text() == candidate
    assert edge.config_path.with_name("edge.yaml.bak").read_text() == started_with


def test_without_its_worker_the_edge_writes_itself(tokens, edge_factory, node_factory) -> None:
    ports = two_ports()
    edge = edge_factory(config(tokens, ports, capacity=2), name="edge-alone")
    node_factory(edge, "node-a")
    wait_node_ready(edge, "node-a")
    first = yaml.safe_dump(config(tokens, ports, capacity=4))
    assert refresh(edge, {"mode": "dry_run", "config_yaml": first})["status"] == "ok"
    [worker] = plan_workers(edge)
    os.kill(worker, signal.SIGKILL)

    applied = refresh(edge, {"mode": "apply", "config_yaml": first, "reason": "alone"})

    assert applied["status"] == "applied", applied
    assert applied["node_pushes"] == [{"node": "node-a", "status": "acked", "error": None}]
    written = record(edge, applied["refresh_id"])
    assert (written["status"], written["reason"], written["result"]) == (
        "applied",
        "alone",
        applied,
    )
    assert active_revision(edge) == applied["candidate_revision"]
    assert edge.config_path.read_text() == first
    # The next plan gets a new worker, which writes again.
    back = yaml.safe_dump(config(tokens, ports, capacity=2))
    again = refresh(edge, {"mode": "apply", "config_yaml": back})
    assert again["status"] == "applied" and record(edge, again["refresh_id"])["result"] == again
    assert len(plan_workers(edge)) == 1 and plan_workers(edge) != [worker]


def test_a_fleet_s_edge_starts_its_worker_as_it_starts(edge_factory) -> None:
    public, admin = two_ports()
    fleet = fleet_yaml(
        FLEET_NODES, edge_listen=f"127.0.0.1:{public}", admin_listen=f"127.0.0.1:{admin}"
    )
    edge = edge_factory(yaml.safe_load(fleet), name="edge-fleet")
    running_text = edge.config_path.read_text()
    assert len(running_text) >= WARM_FROM_CHARS

    [worker] = plan_workers(edge)  # before any refresh: it loads the running config meanwhile
    dry_run = refresh(edge, {"mode": "dry_run", "config_yaml": one_change(running_text)})

    assert dry_run["status"] == "ok", dry_run
    assert len(dry_run["changes"]) == 1
    assert plan_workers(edge) == [worker]
    assert "did not warm up" not in edge.log()
