"""The config revision: sha256 of the canonical form, blind to order, comments and defaults."""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from edge.config import EdgeConfig, load_config_text
from edge.config.canonical import canonical_json, canonical_json_pieces, revision_of


def make_hash(seed: str) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()


def make_full_config_dict() -> dict[str, Any]:
    """Two nodes with two adapters each, several providers, models and principal tokens."""
    return {
        "version": 1,
        "edge": {"id": "edge-rev"},
        "openai": {
            "long_context_threshold_tokens": 8000,
            "principal_tokens": [
                {
                    "token_ref": "cli",
                    "token_hash_sha256": make_hash("cli"),
                    "principal_ref": "team-a",
                },
                {
                    "token_ref": "batch",
                    "token_hash_sha256": make_hash("batch"),
                    "principal_ref": "team-b",
                    "alias": "nightly",
                },
            ],
        },
        "queue": {"max_queue": 10, "queue_timeout_s": 5},
        "nodes": [
            {
                "id": "node-a",
                "alias": "rack-a",
                "token_hash_sha256": make_hash("node-a"),
                "adapters": [
                    {"id": "echo", "type": "echo"},
                    {"id": "vllm", "type": "vllm", "base_url": "http://127.0.0.1:9000/v1"},
                ],
                "providers": [
                    {
                        "id": "a-echo",
                        "adapter": "echo",
                        "served_models": ["small", "large"],
                        "capacity": 4,
                        "long_context_slots": 1,
                    },
                    {
                        "id": "a-llama",
                        "adapter": "vllm",
                        "served_models": ["llama-8b"],
                        "capacity": 8,
                        "priority": 10,
                    },
                ],
            },
            {
                "id": "node-b",
                "token_hash_sha256": make_hash("node-b"),
                "adapters": [
                    {"id": "slow", "type": "echo", "token_delay_ms": 20},
                    {
                        "id": "cloud",
                        "type": "openai_http",
                        "base_url": "https://api.example.com/v1",
                        "api_key_env": "CLOUD_KEY",
                        "timeout_s": 120,
                    },
                ],
                "providers": [
                    {"id": "b-echo", "adapter": "slow", "served_models": ["small"], "capacity": 2},
                    {
                        "id": "b-cloud",
                        "adapter": "cloud",
                        "served_models": ["gpt-x", "gpt-y"],
                        "capacity": 32,
                        "priority": 200,
                        "queue_timeout_s": 2,
                    },
                ],
            },
        ],
        "models": [
            {
                "id": "echo",
                "providers": {"a-echo": "small", "b-echo": "small"},
                "generation": {"default_max_tokens": 64, "max_tokens_limit": 512},
            },
            {"id": "llama", "providers": {"a-llama": "llama-8b", "b-cloud": "gpt-x"}},
        ],
    }


def load_dict(data: dict[str, Any]) -> EdgeConfig:
    return load_config_text(yaml.safe_dump(data, sort_keys=False))


BASE = load_dict(make_full_config_dict())


def changed(change: Callable[[dict[str, Any]], None]) -> EdgeConfig:
    data = copy.deepcopy(make_full_config_dict())
    change(data)
    return load_dict(data)


def reverse_nodes(data: dict[str, Any]) -> None:
    data["nodes"].reverse()


def reverse_adapters(data: dict[str, Any]) -> None:
    for node in data["nodes"]:
        node["adapters"].reverse()


def reverse_providers(data: dict[str, Any]) -> None:
    for node in data["nodes"]:
        node["providers"].reverse()


def reverse_models(data: dict[str, Any]) -> None:
    data["models"].reverse()


def reverse_served_models(data: dict[str, Any]) -> None:
    for node in data["nodes"]:
        for provider in node["providers"]:
            provider["served_models"].reverse()


def reverse_principal_tokens(data: dict[str, Any]) -> None:
    data["openai"]["principal_tokens"].reverse()


def reverse_route_mappings(data: dict[str, Any]) -> None:
    for model in data["models"]:
        model["providers"] = dict(reversed(list(model["providers"].items())))


def reverse_every_mapping(data: Any) -> Any:
    if isinstance(data, dict):
        return {key: reverse_every_mapping(data[key]) for key in reversed(list(data))}
    if isinstance(data, list):
        return [reverse_every_mapping(item) for item in data]
    return data


def test_it_is_sha256_of_the_canonical_json() -> None:
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", BASE.revision)
    digest = hashlib.sha256(canonical_json(BASE.canonical).encode()).hexdigest()
    assert BASE.revision == f"sha256:{digest}" == revision_of(BASE.canonical)


def test_it_is_the_same_on_every_load() -> None:
    assert load_dict(make_full_config_dict()).revision == BASE.revision


@pytest.mark.parametrize(
    "reorder",
    [
        reverse_nodes,
        reverse_adapters,
        reverse_providers,
        reverse_models,
        reverse_served_models,
        reverse_principal_tokens,
        reverse_route_mappings,
    ],
)
def test_it_ignores_order(reorder: Callable[[dict[str, Any]], None]) -> None:
    config = changed(reorder)

    assert config.revision == BASE.revision
    assert config.canonical == BASE.canonical


def test_it_ignores_key_order_in_mappings() -> None:
    data = reverse_every_mapping(make_full_config_dict())

    assert load_dict(data).revision == BASE.revision


def test_it_ignores_comments_and_layout() -> None:
    text = yaml.safe_dump(make_full_config_dict(), sort_keys=False)
    commented = "# the edge config\n\n" + "\n".join(
        f"{line}  # note {index}" if line.rstrip().endswith(("1", "4", "8")) else line
        for index, line in enumerate(text.splitlines())
    )
    flow = yaml.safe_dump(make_full_config_dict(), default_flow_style=True)

    assert "# note" in commented
    assert load_config_text(commented).revision == BASE.revision
    assert load_config_text(flow).revision == BASE.revision


def spell_out_defaults(data: dict[str, Any]) -> None:
    data["edge"].update(
        listen="127.0.0.1:8000", admin_listen="127.0.0.1:8001", bootstrap_path="var/bootstrap"
    )
    data["control_plane"] = {"url": None}
    data["openai"].update(listen=None, require_auth=True)
    for token in data["openai"]["principal_tokens"]:
        token.setdefault("alias", None)
    for node in data["nodes"]:
        node.setdefault("alias", None)
        node["concurrency"] = None
        for adapter in node["adapters"]:
            if adapter["type"] == "echo":
                adapter.setdefault("token_delay_ms", 0)
            else:
                adapter.setdefault("timeout_s", 60)
                adapter.setdefault("health_interval_s", 10.0)
                adapter.setdefault("api_key_env", None)
        for provider in node["providers"]:
            provider.setdefault("enabled", True)
            provider.setdefault("priority", 100)
            provider.setdefault("max_queue", data["queue"]["max_queue"])
            provider.setdefault("queue_timeout_s", float(data["queue"]["queue_timeout_s"]))
            provider.setdefault("long_context_slots", None)
    for model in data["models"]:
        model.setdefault("generation", {"default_max_tokens": None, "max_tokens_limit": None})


def test_it_ignores_spelled_out_defaults() -> None:
    assert changed(spell_out_defaults).revision == BASE.revision


def test_it_ignores_spelled_out_global_defaults() -> None:
    data = make_full_config_dict()
    del data["queue"]
    del data["openai"]["long_context_threshold_tokens"]
    spelled = copy.deepcopy(data)
    spelled["queue"] = {"max_queue": 64, "queue_timeout_s": 30}
    spelled["openai"]["long_context_threshold_tokens"] = 100_000
    for node in spelled["nodes"]:
        for provider in node["providers"]:
            provider.setdefault("max_queue", 64)

    assert load_dict(spelled).revision == load_dict(data).revision


def test_it_ignores_adapter_type_aliases_and_trailing_slashes() -> None:
    def respell(data: dict[str, Any]) -> None:
        vllm = data["nodes"][0]["adapters"][1]
        vllm.update(type="openai_http", base_url=vllm["base_url"] + "/")
        data["nodes"][1]["adapters"][1]["type"] = "openai"

    assert changed(respell).revision == BASE.revision


def set_capacity(data: dict[str, Any]) -> None:
    data["nodes"][0]["providers"][0]["capacity"] = 5


def set_priority(data: dict[str, Any]) -> None:
    data["nodes"][1]["providers"][1]["priority"] = 199


def disable_provider(data: dict[str, Any]) -> None:
    data["nodes"][0]["providers"][1]["enabled"] = False


def set_queue_default(data: dict[str, Any]) -> None:
    data["queue"]["max_queue"] = 11


def drop_route(data: dict[str, Any]) -> None:
    del data["models"][0]["providers"]["b-echo"]


def set_threshold(data: dict[str, Any]) -> None:
    data["openai"]["long_context_threshold_tokens"] = 8001


def set_token_alias(data: dict[str, Any]) -> None:
    data["openai"]["principal_tokens"][0]["alias"] = "cli"


def set_base_url(data: dict[str, Any]) -> None:
    data["nodes"][0]["adapters"][1]["base_url"] = "http://127.0.0.1:9001/v1"


@pytest.mark.parametrize(
    "change",
    [
        set_capacity,
        set_priority,
        disable_provider,
        set_queue_default,
        drop_route,
        set_threshold,
        set_token_alias,
        set_base_url,
    ],
)
def test_it_changes_with_a_real_change(change: Callable[[dict[str, Any]], None]) -> None:
    config = changed(change)

    assert re.fullmatch(r"sha256:[0-9a-f]{64}", config.revision)
    assert config.revision != BASE.revision


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=4), children, max_size=4),
    max_leaves=30,
)


@given(JSON_VALUES)
def test_the_revision_hashes_exactly_the_canonical_json(data: Any) -> None:
    # Encoded in pieces (so no one encoder call holds the interpreter long), hashed as one.
    assert "".join(canonical_json_pieces(data)) == canonical_json(data)
    expected = hashlib.sha256(canonical_json(data).encode()).hexdigest()
    assert revision_of(data) == f"sha256:{expected}"
