"""The Node payload contract: the Edge's canonical node entry, parsed and checked on the Node."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from edge.config import ConfigError, load_config_file, load_config_text
from edge.config.canonical import node_canonical
from nodes.wire import (
    AdapterSpec,
    NodeConfigError,
    NodeProviderSpec,
    adapter_payload,
    parse_node_config,
)
from nodes.wire.node_config import url_for_message
from tests.nodes.node_payloads import make_node

CONFIGS = Path(__file__).resolve().parents[3] / "configs"

VLLM = {
    "id": "vllm",
    "type": "openai_http",
    "base_url": "http://127.0.0.1:9000/v1/",
    "api_key_env": "VLLM_API_KEY",
    "timeout_s": 20.0,
    "health_interval_s": 5.0,
}


def payload() -> dict[str, Any]:
    node = make_node(providers=(("p-echo", "echo", ("echo-small",)),))
    node["adapters"].append(dict(VLLM))
    node["providers"].append({"id": "p-vllm", "adapter": "vllm", "served_models": ["llama"]})
    return node


def test_it_reads_the_edges_canonical_node_payload() -> None:
    spec = parse_node_config(payload(), node_id="node-a")
    assert spec.id == "node-a"
    assert AdapterSpec(id="echo", type="echo") in spec.adapters
    assert (
        AdapterSpec(
            id="vllm",
            type="openai_http",
            base_url="http://127.0.0.1:9000/v1",
            api_key_env="VLLM_API_KEY",
            timeout_s=20.0,
            health_interval_s=5.0,
        )
        in spec.adapters
    )
    assert NodeProviderSpec("p-vllm", "vllm", frozenset({"llama"})) in spec.providers


@pytest.mark.parametrize("name", ["edge.yaml", "edge.provider-pool.yaml"])
def test_it_parses_each_payload_into_the_adapters_the_edge_config_holds(name: str) -> None:
    config = load_config_file(CONFIGS / name)
    for node in config.nodes:
        spec = parse_node_config(node_canonical(node), node_id=node.id)
        assert set(spec.adapters) == set(node.adapters)
        assert {p.id: p.served_models for p in spec.providers} == {
            p.id: frozenset(p.served_models) for p in node.providers
        }


def test_it_sends_each_adapter_type_exactly_its_keys_with_the_defaults() -> None:
    echo = AdapterSpec(id="echo", type="echo", base_url="http://unused/v1")
    vllm = AdapterSpec(id="vllm", type="openai_http", base_url="http://h/v1", token_delay_ms=5)
    assert adapter_payload(echo) == {"id": "echo", "type": "echo", "token_delay_ms": 0.0}
    assert adapter_payload(vllm) == {
        "id": "vllm",
        "type": "openai_http",
        "base_url": "http://h/v1",
        "api_key_env": None,
        "timeout_s": 60.0,
        "health_interval_s": 10.0,
    }


def test_it_sends_the_optional_openai_http_keys_only_when_they_are_not_their_default() -> None:
    # Left out at their default, they leave the canonical form (and revision) of a config that
    # does not use them as it was before they existed.
    plain = AdapterSpec(id="v", type="openai_http", base_url="http://h/v1")
    assert "health_path" not in adapter_payload(plain)
    assert "max_tokens_param" not in adapter_payload(plain)
    tuned = AdapterSpec(
        id="v",
        type="openai_http",
        base_url="http://h/v1",
        health_path=False,
        max_tokens_param="max_tokens",
    )
    assert adapter_payload(tuned) == {
        **adapter_payload(plain),
        "health_path": False,
        "max_tokens_param": "max_tokens",
    }
    node = make_node(providers=())
    node["adapters"] = [adapter_payload(tuned)]
    assert parse_node_config(node, node_id="node-a").adapters == (tuned,)


@pytest.mark.parametrize(
    ("options", "health_path", "max_tokens_param"),
    [
        ({}, "/models", None),
        ({"health_path": "/health", "max_tokens_param": None}, "/health", None),
        (
            {"health_path": False, "max_tokens_param": "max_completion_tokens"},
            False,
            "max_completion_tokens",
        ),
    ],
)
def test_it_reads_the_probe_path_and_the_max_tokens_name(
    options: dict[str, Any], health_path: Any, max_tokens_param: Any
) -> None:
    node = payload()
    node["adapters"][1].update(options)
    [vllm] = [a for a in parse_node_config(node, node_id="node-a").adapters if a.id == "vllm"]
    assert (vllm.health_path, vllm.max_tokens_param) == (health_path, max_tokens_param)


@pytest.mark.parametrize("alias", ["openai", "openai_compatible", "vllm", "ollama"])
def test_it_normalizes_adapter_type_aliases(alias: str) -> None:
    node = payload()
    node["adapters"][1]["type"] = alias
    spec = parse_node_config(node, node_id="node-a")
    assert {a.type for a in spec.adapters} == {"echo", "openai_http"}


def _break(path: tuple[Any, ...], value: Any) -> Any:
    def apply(node: dict[str, Any]) -> dict[str, Any]:
        target: Any = node
        for key in path[:-1]:
            target = target[key]
        if value is KeyError:
            del target[path[-1]]
        else:
            target[path[-1]] = value
        return node

    return apply


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (_break(("id",), "node-b"), "node.id: is 'node-b', but this agent is node 'node-a'"),
        (_break(("adapters",), None), "node.adapters: must be a list"),
        (_break(("adapters", 1, "type"), "grpc"), "node.adapters[vllm].type: 'grpc' is not one of"),
        (_break(("adapters", 1, "base_url"), "ftp://x"), "node.adapters[vllm].base_url: must be"),
        (_break(("adapters", 1, "base_url"), KeyError), "node.adapters[vllm].base_url"),
        (_break(("adapters", 1, "base_url"), "http://"), "node.adapters[vllm].base_url"),
        (_break(("adapters", 1, "base_url"), "http://[::1/v1"), "node.adapters[vllm].base_url"),
        (_break(("adapters", 1, "base_url"), "http://a b/v1"), "node.adapters[vllm].base_url"),
        (_break(("adapters", 1, "api_key_env"), "sk-123 raw"), "node.adapters[vllm].api_key_env"),
        (_break(("adapters", 1, "timeout_s"), 0), "node.adapters[vllm].timeout_s: must be > 0"),
        (_break(("adapters", 1, "health_interval_s"), "5"), "health_interval_s: must be a number"),
        (_break(("adapters", 0, "token_delay_ms"), -1), "node.adapters[echo].token_delay_ms"),
        (_break(("adapters", 1, "health_path"), "models"), "node.adapters[vllm].health_path: must"),
        (_break(("adapters", 1, "health_path"), True), "node.adapters[vllm].health_path: must"),
        (_break(("adapters", 1, "health_path"), "/a b"), "node.adapters[vllm].health_path: must"),
        (_break(("adapters", 1, "health_path"), "/h?k=1"), "node.adapters[vllm].health_path: must"),
        (
            _break(("adapters", 1, "max_tokens_param"), "max_new_tokens"),
            "node.adapters[vllm].max_tokens_param: must be one of max_tokens, max_completion",
        ),
        (_break(("adapters", 1, "id"), "echo"), "node.adapters[echo]: duplicate id"),
        (_break(("adapters", 1, "id"), ""), "node.adapters[1].id: must be a non-empty string"),
        (
            _break(("providers", 1, "adapter"), "tgi"),
            "node.providers[p-vllm].adapter: 'tgi' is not",
        ),
        (_break(("providers", 1, "served_models"), []), "node.providers[p-vllm].served_models"),
        (_break(("providers", 1, "id"), "p-echo"), "node.providers[p-echo]: duplicate id"),
        (_break(("providers", 0), "p"), "node.providers[0]: must be an object"),
    ],
)
def test_it_rejects_a_payload_naming_the_field(change: Any, reason: str) -> None:
    node = change(copy.deepcopy(payload()))
    with pytest.raises(NodeConfigError) as caught:
        parse_node_config(node, node_id="node-a")
    assert reason in str(caught.value)


def test_it_reports_every_problem_at_once() -> None:
    node = payload()
    node["adapters"][1]["base_url"] = None
    node["providers"][0]["served_models"] = "echo-small"
    with pytest.raises(NodeConfigError) as caught:
        parse_node_config(node, node_id="node-a")
    assert len(caught.value.problems) == 2


def test_it_does_not_blame_providers_for_their_broken_adapter() -> None:
    node = payload()
    node["adapters"][1]["timeout_s"] = -1
    with pytest.raises(NodeConfigError) as caught:
        parse_node_config(node, node_id="node-a")
    assert caught.value.problems == ["node.adapters[vllm].timeout_s: must be > 0"]


def test_it_rejects_a_payload_that_is_not_an_object() -> None:
    with pytest.raises(NodeConfigError, match="node: must be an object"):
        parse_node_config(["node-a"], node_id="node-a")


def edge_config(**adapter_options: Any) -> str:
    options = "".join(f", {key}: {value}" for key, value in adapter_options.items())
    return f"""
version: 1
edge: {{id: e}}
nodes:
  - id: node-a
    token_hash_sha256: "{"0" * 64}"
    adapters: [{{id: up, type: openai_http, base_url: "http://127.0.0.1:9000/v1"{options}}}]
    providers: [{{id: p, adapter: up, served_models: [m], capacity: 1}}]
"""


def test_the_edge_loads_the_optional_keys_and_sends_them_as_the_node_reads_them() -> None:
    config = load_config_text(edge_config(health_path="false", max_tokens_param="max_tokens"))
    [adapter] = config.nodes[0].adapters
    assert (adapter.health_path, adapter.max_tokens_param) == (False, "max_tokens")
    payload = node_canonical(config.nodes[0])
    assert parse_node_config(payload, node_id="node-a").adapters == (adapter,)


def test_the_edge_config_revision_ignores_the_optional_keys_spelled_at_their_default() -> None:
    plain = load_config_text(edge_config())
    spelled = load_config_text(edge_config(health_path="/models", max_tokens_param="null"))
    tuned = load_config_text(edge_config(health_path="/health"))
    assert spelled.revision == plain.revision != tuned.revision


@pytest.mark.parametrize(
    ("options", "path", "message"),
    [
        ({"health_path": "health"}, "health_path", "must be a path under base_url such as"),
        ({"health_path": "true"}, "health_path", "or false for no probe"),
        ({"health_path": "'/health?key=sk-1'"}, "health_path", "(no query)"),
        ({"max_tokens_param": "n_predict"}, "max_tokens_param", "must be one of max_tokens"),
    ],
)
def test_the_edge_refuses_a_bad_optional_key_naming_it(
    options: dict[str, str], path: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_text(edge_config(**options))
    [issue] = caught.value.issues
    assert issue.path == f"nodes[node-a].adapters[up].{path}"
    assert message in issue.message
    assert "sk-1" not in str(caught.value)  # a query may hold a key: never echoed


SECRET = "sk-PLANTED-4f9c1e7b2a"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("base_url", SECRET),
        ("base_url", f"ftp://me:{SECRET}@host/v1?key={SECRET}"),
        ("base_url", f"http://host:99999/v1?key={SECRET}"),
        ("api_key_env", SECRET),
        ("health_path", f"/health?key={SECRET}"),
    ],
)
def test_it_quotes_no_planted_secret(key: str, value: str) -> None:
    node = payload()
    node["adapters"][1][key] = value
    with pytest.raises(NodeConfigError) as caught:
        parse_node_config(node, node_id="node-a")
    assert str(caught.value).startswith(f"node.adapters[vllm].{key}: must be")
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://127.0.0.1:9000/v1", "http://127.0.0.1:9000/v1"),
        (f"https://me:{SECRET}@api.example/v1?key={SECRET}#{SECRET}", "https://api.example/v1"),
        (f"https://{SECRET}@[::1]:8443/v1", "https://[::1]:8443/v1"),
        (SECRET, "a value that is no URL"),
        (f"http://host:99999/{SECRET}", "an unreadable URL"),
    ],
)
def test_url_for_message_drops_what_may_hold_a_key(url: str, shown: str) -> None:
    assert url_for_message(url) == shown
