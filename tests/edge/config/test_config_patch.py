"""A candidate carried as a patch over the running config (edge.config.patch) is rebuilt equal
to itself, through pickling, from the running config's own objects where nothing changed."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from bench.fleet_config import fleet_yaml
from edge.config import EdgeConfig, load_config_text
from edge.config.patch import (
    PIECE_ENTRIES,
    PatchMismatch,
    apply_patch,
    dumps,
    dumps_in_pieces,
    loads_in_pieces,
    patch_against,
)

RUNNING_TEXT = fleet_yaml(12)  # every model has a route on two nodes, or one
RUNNING = load_config_text(RUNNING_TEXT)


def edited(edit: Callable[[dict[str, Any]], None]) -> EdgeConfig:
    data = yaml.safe_load(RUNNING_TEXT)
    edit(data)
    return load_config_text(yaml.safe_dump(data, sort_keys=False))


def set_capacity(data: dict[str, Any]) -> None:
    data["nodes"][2]["providers"][3]["capacity"] = 9


def add_node(data: dict[str, Any]) -> None:
    node = dict(data["nodes"][0], id="node-new", token_hash_sha256="b" * 64, providers=[])
    data["nodes"].append(node)


def remove_node(data: dict[str, Any]) -> None:
    dropped = data["nodes"].pop(0)  # its models have routes on node 10 too
    gone = {provider["id"] for provider in dropped["providers"]}
    for model in data["models"]:
        model["providers"] = {p: s for p, s in model["providers"].items() if p not in gone}


def reorder_nodes(data: dict[str, Any]) -> None:
    data["nodes"].reverse()


def change_routes(data: dict[str, Any]) -> None:
    model = next(m for m in data["models"] if len(m["providers"]) > 1)
    model["providers"].popitem()


def remove_model(data: dict[str, Any]) -> None:
    del data["models"][0]


def add_token(data: dict[str, Any]) -> None:
    data["openai"]["principal_tokens"] = [
        {"token_ref": "app-9", "token_hash_sha256": "a" * 64, "principal_ref": "team-9"}
    ]


EDITS = [set_capacity, add_node, remove_node, reorder_nodes, change_routes, remove_model, add_token]


@pytest.mark.parametrize("edit", EDITS, ids=[edit.__name__ for edit in EDITS])
def test_the_rebuilt_candidate_is_the_candidate(edit: Callable[[dict[str, Any]], None]) -> None:
    candidate = edited(edit)

    patch = pickle.loads(dumps(patch_against(candidate, RUNNING)))
    rebuilt = apply_patch(patch, RUNNING)

    assert rebuilt == candidate
    assert rebuilt.revision == candidate.revision
    assert rebuilt.canonical == candidate.canonical
    assert [n.id for n in rebuilt.nodes] == [n.id for n in candidate.nodes]
    assert rebuilt.node("node-new") == candidate.node("node-new")
    assert rebuilt.summary() == candidate.summary()


def every_capacity(data: dict[str, Any]) -> None:
    for node in data["nodes"]:
        for provider in node["providers"]:
            provider["capacity"] = 7


@pytest.mark.parametrize("edit", [*EDITS, every_capacity], ids=lambda edit: edit.__name__)
def test_a_patch_in_pieces_is_the_patch(
    edit: Callable[[dict[str, Any]], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("edge.config.patch.PIECE_ENTRIES", 5)  # 12 nodes: several pieces
    candidate = edited(edit)
    patch = patch_against(candidate, RUNNING)

    pieces = dumps_in_pieces(patch)
    rebuilt = loads_in_pieces(pieces)

    assert rebuilt == patch
    assert apply_patch(rebuilt, RUNNING) == candidate
    entries = [pickle.loads(piece)[2] for piece in pieces[1:]]
    assert all(0 < len(items) <= 5 for items in entries)


def test_a_fleet_s_patch_travels_in_pieces_of_bounded_size() -> None:
    running = load_config_text(fleet_yaml(PIECE_ENTRIES * 3))
    candidate = load_config_text(fleet_yaml(PIECE_ENTRIES * 3, capacity=5))

    pieces = dumps_in_pieces(patch_against(candidate, running))

    # The skeleton, then every changed node and its canonical entry, PIECE_ENTRIES at a time.
    assert len(pieces) == 1 + 3 + 3
    assert max(len(piece) for piece in pieces) < 3 * min(len(piece) for piece in pieces[1:])


def test_what_did_not_change_is_the_running_config_s_own_objects() -> None:
    candidate = edited(set_capacity)

    patch = patch_against(candidate, RUNNING)
    rebuilt = apply_patch(pickle.loads(dumps(patch)), RUNNING)

    assert list(patch.nodes) == ["node-00002"] and patch.models == {}
    assert patch.canonical_entries["nodes"].keys() == {"node-00002"}
    unchanged = [n for n in rebuilt.nodes if n.id != "node-00002"]
    assert all(node is RUNNING.node(node.id) for node in unchanged)
    assert all(new is old for new, old in zip(rebuilt.models, RUNNING.models, strict=True))
    old_entries = {entry["id"]: entry for entry in RUNNING.canonical["nodes"]}
    assert all(
        entry is old_entries[entry["id"]]
        for entry in rebuilt.canonical["nodes"]
        if entry["id"] != "node-00002"
    )


def test_a_patch_applies_only_over_the_config_it_was_made_against() -> None:
    patch = patch_against(edited(set_capacity), RUNNING)

    with pytest.raises(PatchMismatch, match=RUNNING.revision):
        apply_patch(patch, edited(add_token))


def test_read_only_mappings_keep_their_order_through_pickling() -> None:
    model = RUNNING.models[0]

    rebuilt = pickle.loads(dumps(model))

    assert rebuilt == model and list(rebuilt.providers) == list(model.providers)
    with pytest.raises(TypeError):
        rebuilt.providers["x"] = "y"  # type: ignore[index]
