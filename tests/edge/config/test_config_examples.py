"""The shipped example configs load, and a loaded config cannot be changed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from edge.config import EdgeConfig, load_config_file, load_config_text
from edge.config.schema import Model, Node, Provider
from nodes.wire import AdapterSpec

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def load_example(name: str) -> EdgeConfig:
    return load_config_file(CONFIGS / name)


def node_of(config: EdgeConfig, node_id: str) -> Node:
    node = config.node(node_id)
    assert node is not None
    return node


def adapters_by_id(node: Node) -> dict[str, AdapterSpec]:
    return {a.id: a for a in node.adapters}


def providers_by_id(config: EdgeConfig) -> dict[str, tuple[Node, Provider]]:
    return {p.id: (n, p) for n in config.nodes for p in n.providers}


def models_by_id(config: EdgeConfig) -> dict[str, Model]:
    return {m.id: m for m in config.models}


def test_it_loads_the_default_config() -> None:
    config = load_example("edge.yaml")

    assert config.edge.id == "edge-dev"
    assert config.summary() == "1 nodes, 3 providers, 2 models, 1 principal tokens"
    assert [a.id for a in config.nodes[0].adapters] == ["echo", "echo-slow"]
    assert adapters_by_id(config.nodes[0])["echo-slow"].token_delay_ms == 20.0
    overflow = providers_by_id(config)["echo-overflow"][1]
    assert (overflow.priority, overflow.max_queue, overflow.queue_timeout_s) == (50, 16, 30.0)
    assert dict(models_by_id(config)["echo"].providers) == {
        "echo-a": "echo-small",
        "echo-b": "echo-small",
        "echo-overflow": "echo-small",
    }


def test_it_loads_the_provider_pool_config() -> None:
    config = load_example("edge.provider-pool.yaml")

    assert config.summary() == "3 nodes, 4 providers, 2 models, 3 principal tokens"
    vllm = adapters_by_id(node_of(config, "gpu-a"))["vllm"]
    assert (vllm.type, vllm.base_url, vllm.api_key_env) == (
        "openai_http",
        "http://127.0.0.1:9000/v1",
        "VLLM_API_KEY",
    )
    assert adapters_by_id(node_of(config, "gpu-b"))["ollama"].type == "openai_http"
    node, provider = providers_by_id(config)["gpu-b-llama"]
    assert node.id == "gpu-b"
    assert provider.served_models == ("llama3.1:8b", "qwen2.5:14b")
    assert (provider.max_queue, provider.queue_timeout_s) == (32, 30.0)
    assert providers_by_id(config)["cloud-gpt"][1].queue_timeout_s == 10.0
    assert models_by_id(config)["qwen-2.5-14b"].generation.default_max_tokens is None


@pytest.mark.parametrize("name", ["edge.yaml", "edge.provider-pool.yaml"])
def test_it_loads_an_example_from_a_string_path_text_and_bytes(name: str) -> None:
    path = CONFIGS / name
    revision = load_config_file(path).revision

    assert load_config_file(str(path)).revision == revision
    assert load_config_text(path.read_text()).revision == revision
    assert load_config_text(path.read_bytes()).revision == revision


def test_it_gives_each_example_its_own_revision() -> None:
    assert load_example("edge.yaml").revision != load_example("edge.provider-pool.yaml").revision


@pytest.mark.parametrize(
    ("owner", "attribute", "value"),
    [
        ("config", "revision", "sha256:0"),
        ("config", "nodes", ()),
        ("edge", "admin_listen", "0.0.0.0:8001"),
        ("openai", "require_auth", False),
        ("queue", "max_queue", 0),
        ("node", "token_hash_sha256", "0" * 64),
        ("adapter", "base_url", "http://evil/v1"),
        ("provider", "capacity", 1000),
        ("model", "providers", {}),
        ("token", "principal_ref", "root"),
    ],
)
def test_it_refuses_attribute_assignment(owner: str, attribute: str, value: object) -> None:
    config = load_example("edge.provider-pool.yaml")
    objects = {
        "config": config,
        "edge": config.edge,
        "openai": config.openai,
        "queue": config.queue,
        "node": config.nodes[0],
        "adapter": config.nodes[0].adapters[0],
        "provider": config.nodes[0].providers[0],
        "model": config.models[0],
        "token": config.openai.principal_tokens[0],
    }

    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(objects[owner], attribute, value)


def test_it_keeps_collections_read_only() -> None:
    config = load_example("edge.provider-pool.yaml")
    routes = models_by_id(config)["llama-3.1-8b"].providers

    with pytest.raises(TypeError):
        routes["gpu-a-llama"] = "other"  # type: ignore[index]
    with pytest.raises(TypeError):
        del routes["cloud-gpt"]  # type: ignore[attr-defined]
    assert isinstance(config.nodes, tuple)
    assert isinstance(config.nodes[0].providers, tuple)
    assert isinstance(config.nodes[0].providers[0].served_models, tuple)
    assert isinstance(config.openai.principal_tokens, tuple)
