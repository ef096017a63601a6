"""The benchmark's generated fleets: a 3,000-node config loads within the caps, and its one
change is one live change to one Node."""

from __future__ import annotations

from bench.fleet_config import fleet_yaml, node_id, node_token, one_change
from edge.config import load_config_text
from edge.config.yaml_source import MAX_CONFIG_BYTES
from edge.tokens import sha256_hex
from refresh.plan import plan_refresh


def test_a_fleet_of_3000_nodes_loads_within_the_size_caps() -> None:
    text = fleet_yaml(3000)
    assert 4 * 1024 * 1024 < len(text.encode()) < MAX_CONFIG_BYTES

    config = load_config_text(text)

    assert config.summary() == "3000 nodes, 30000 providers, 100 models, 0 principal tokens"
    last = config.node(node_id(2999))
    assert last is not None and last.token_hash_sha256 == sha256_hex(node_token(2999))


def test_one_change_is_one_live_change_to_the_first_node() -> None:
    text = fleet_yaml(10)

    plan = plan_refresh(load_config_text(text), one_change(text), mode="dry_run")

    classification = plan.result.classification
    assert plan.result.status == "ok"
    assert [(c.path, c.old, c.new, c.apply) for c in classification.changes] == [
        ("nodes[node-00000].providers[node-00000-p0].capacity", 4, 5, "live")
    ]
    assert classification.reconfigured_nodes == [node_id(0)]
