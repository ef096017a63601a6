"""A candidate shares its unchanged pieces with the config in force (edge.config.sharing)."""

from __future__ import annotations

import yaml

from edge.config import load_config_text
from edge.config.sharing import sharing_unchanged
from tests.e2e.harness import Tokens, echo_config

TOKENS = Tokens()


def two_node_config(capacity_b: int = 4) -> str:
    config = echo_config(
        TOKENS,
        18000,
        18001,
        providers=[{"id": "a-1", "adapter": "echo", "served_models": ["e"], "capacity": 4}],
        models=[
            {"id": "a", "providers": {"a-1": "e"}},
            {"id": "b", "providers": {"b-1": "e"}},
        ],
        extra_nodes=[
            {
                "id": "node-b",
                "token_hash_sha256": "0" * 64,
                "adapters": [{"id": "echo", "type": "echo"}],
                "providers": [
                    {"id": "b-1", "adapter": "echo", "served_models": ["e"], "capacity": capacity_b}
                ],
            }
        ],
    )
    return yaml.safe_dump(config)


def test_unchanged_nodes_models_and_canonical_entries_are_the_running_objects() -> None:
    running = load_config_text(two_node_config())
    candidate = load_config_text(two_node_config(capacity_b=5))

    shared = sharing_unchanged(candidate, running)

    assert shared == candidate and shared.revision == candidate.revision
    assert shared.canonical == candidate.canonical
    assert shared.node("node-a") is running.node("node-a")
    assert shared.node("node-b") is candidate.node("node-b")  # changed: the candidate's own
    assert shared.models == running.models and all(
        new is old for new, old in zip(shared.models, running.models, strict=True)
    )
    old_nodes = {n["id"]: n for n in running.canonical["nodes"]}
    new_nodes = {n["id"]: n for n in shared.canonical["nodes"]}
    assert new_nodes["node-a"] is old_nodes["node-a"]
    assert new_nodes["node-b"] is not old_nodes["node-b"]
    assert shared.canonical["openai"] is running.canonical["openai"]


def test_a_candidate_equal_to_the_running_config_is_the_running_pieces_throughout() -> None:
    running = load_config_text(two_node_config())
    shared = sharing_unchanged(load_config_text(two_node_config()), running)

    assert all(a is b for a, b in zip(shared.nodes, running.nodes, strict=True))
    assert all(
        shared.canonical[key] is running.canonical[key]
        for key in running.canonical
        if key not in ("nodes", "models")
    )
