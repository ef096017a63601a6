"""Validation rules of the config core: every problem is reported with its identity path."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import pytest
import yaml

from edge.config import ConfigError, ConfigIssue, EdgeConfig, load_config_text
from edge.config.formats import ID_EXPECTED

DELETE = object()


def make_hash(seed: str) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()


def make_node(node_id: str, provider_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": node_id,
        "token_hash_sha256": make_hash(node_id),
        "adapters": [{"id": "echo", "type": "echo"}],
        "providers": [
            {"id": provider_id, "adapter": "echo", "served_models": ["echo-small"], "capacity": 4}
        ],
        **extra,
    }


def make_http_adapter(**extra: Any) -> dict[str, Any]:
    return {"id": "http", "type": "openai_http", "base_url": "http://127.0.0.1:9000/v1", **extra}


def make_token(token_ref: str, seed: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "token_ref": token_ref,
        "token_hash_sha256": make_hash(seed or token_ref),
        "principal_ref": "team-a",
        **extra,
    }


def make_config_dict() -> dict[str, Any]:
    """The smallest valid config: one node, one echo adapter, one provider, one model."""
    return {
        "version": 1,
        "edge": {"id": "edge-test"},
        "openai": {"principal_tokens": [make_token("cli")]},
        "nodes": [make_node("node-a", "p1")],
        "models": [{"id": "echo", "providers": {"p1": "echo-small"}}],
    }


def make_config_with(changes: dict[str, Any]) -> dict[str, Any]:
    """``make_config_dict()`` with dotted-path changes: ``{"nodes.0.providers.0.capacity": 0}``.

    A list index equal to the list's length appends; the value ``DELETE`` removes the key.
    """
    data = make_config_dict()
    for dotted, value in changes.items():
        *parents, last = [int(part) if part.isdigit() else part for part in dotted.split(".")]
        target = data
        for part in parents:
            target = target[part]
        if value is DELETE:
            del target[last]
        elif isinstance(target, list) and last == len(target):
            target.append(copy.deepcopy(value))
        else:
            target[last] = copy.deepcopy(value)
    return data


def load_dict(data: Any) -> EdgeConfig:
    return load_config_text(yaml.safe_dump(data, sort_keys=False))


def issues_of(data: Any) -> list[ConfigIssue]:
    with pytest.raises(ConfigError) as caught:
        load_dict(data)
    return caught.value.issues


def assert_issue(data: Any, path: str, fragment: str) -> None:
    issues = issues_of(data)
    matching = [issue for issue in issues if issue.path == path and fragment in issue.message]
    assert matching, f"no issue {path!r} containing {fragment!r} in:\n" + "\n".join(
        str(issue) for issue in issues
    )


P1 = "nodes[node-a].providers[p1]"
ECHO = "nodes[node-a].adapters[echo]"
HTTP = "nodes[node-a].adapters[http]"


def test_it_loads_the_minimal_config() -> None:
    config = load_dict(make_config_dict())

    assert config.summary() == "1 nodes, 1 providers, 1 models, 1 principal tokens"
    provider = config.nodes[0].providers[0]
    assert (provider.enabled, provider.priority, provider.max_queue) == (True, 100, 64)
    assert provider.queue_timeout_s == 30.0


@pytest.mark.parametrize(
    ("changes", "path", "fragment"),
    [
        pytest.param(
            {"nodes.0.providers.0.capcity": 4},
            f"{P1}.capcity",
            "unknown key; did you mean 'capacity'?",
            id="provider-capcity",
        ),
        pytest.param(
            {"edge.admin_listne": "127.0.0.1:8001"},
            "edge.admin_listne",
            "did you mean 'admin_listen'?",
            id="edge-admin_listne",
        ),
        pytest.param({"model": []}, "model", "did you mean 'models'?", id="top-model"),
        pytest.param(
            {"models.0.generaton": {}},
            "models[echo].generaton",
            "did you mean 'generation'?",
            id="model-generaton",
        ),
        pytest.param(
            {"openai.principal_tokens.0.principal": "x"},
            "openai.principal_tokens[cli].principal",
            "did you mean 'principal_ref'?",
            id="token-principal",
        ),
        pytest.param(
            {"edge.zzz": 1}, "edge.zzz", "unknown key; known keys: id, listen", id="no-near-key"
        ),
    ],
)
def test_it_rejects_unknown_keys_with_a_suggestion(
    changes: dict[str, Any], path: str, fragment: str
) -> None:
    assert_issue(make_config_with(changes), path, fragment)


@pytest.mark.parametrize(
    ("changes", "path", "fragment"),
    [
        pytest.param({"edge.id": "Edge"}, "edge.id", "must be 1-63 characters", id="edge"),
        pytest.param({"edge.id": ""}, "edge.id", "must be 1-63 characters", id="edge-empty"),
        pytest.param(
            {"nodes.0.id": "Node A"}, "nodes[Node A].id", "must be 1-63 characters", id="node"
        ),
        pytest.param(
            {"nodes.0.id": "n" * 64}, f"nodes[{'n' * 64}].id", "1-63 characters", id="node-long"
        ),
        pytest.param(
            {"nodes.0.alias": "Rack 1"}, "nodes[node-a].alias", "1-63 characters", id="alias"
        ),
        pytest.param(
            {"nodes.0.adapters.0.id": "Echo!"},
            "nodes[node-a].adapters[Echo!].id",
            "must be 1-63 characters",
            id="adapter",
        ),
        pytest.param(
            {"nodes.0.providers.0.id": "-p1"},
            "nodes[node-a].providers[-p1].id",
            "starting with a letter or digit",
            id="provider",
        ),
        pytest.param(
            {"nodes.0.providers.0.adapter": "Echo"},
            f"{P1}.adapter",
            "must be 1-63 characters",
            id="provider-adapter",
        ),
        pytest.param(
            {"models.0.id": "bad model"},
            "models[bad model].id",
            "must be 1-128 characters",
            id="model",
        ),
        pytest.param(
            {"openai.principal_tokens.0.token_ref": "Bad Ref"},
            "openai.principal_tokens[Bad Ref].token_ref",
            "must be 1-63 characters",
            id="token_ref",
        ),
        pytest.param(
            {"openai.principal_tokens.0.principal_ref": "team a"},
            "openai.principal_tokens[cli].principal_ref",
            "must be 1-128 characters",
            id="principal_ref",
        ),
        pytest.param(
            {"nodes.0.adapters.1": make_http_adapter(api_key_env="1KEY")},
            f"{HTTP}.api_key_env",
            "an environment variable name",
            id="api_key_env",
        ),
        pytest.param(
            {"models.0.providers": {"P 1": "echo-small"}},
            "models[echo].providers",
            "provider id 'P 1' must be 1-63 characters",
            id="route-provider",
        ),
        pytest.param(
            {"models.0.providers": {"p1": "echo small"}},
            "models[echo].providers[p1]",
            "must be a served model name",
            id="route-served-name",
        ),
        pytest.param(
            {"nodes.0.providers.0.served_models": ["echo small"]},
            f"{P1}.served_models[0]",
            "1-256 characters without spaces",
            id="served-model",
        ),
    ],
)
def test_it_checks_id_formats(changes: dict[str, Any], path: str, fragment: str) -> None:
    assert_issue(make_config_with(changes), path, fragment)


@pytest.mark.parametrize(
    ("changes", "path", "fragment"),
    [
        pytest.param(
            {"nodes.1": make_node("node-a", "p2", token_hash_sha256=make_hash("other"))},
            "nodes[node-a]",
            "duplicate node id 'node-a' (2 times)",
            id="node-id",
        ),
        pytest.param(
            {"nodes.0.alias": "gpu", "nodes.1": make_node("node-b", "p2", alias="gpu")},
            "nodes[node-b].alias",
            "node alias 'gpu' is already used at nodes[node-a].alias",
            id="node-alias",
        ),
        pytest.param(
            {"nodes.0.adapters.1": {"id": "echo", "type": "echo", "token_delay_ms": 5}},
            "nodes[node-a].adapters[echo]",
            "duplicate adapter id 'echo' (2 times)",
            id="adapter-id",
        ),
        pytest.param(
            {"nodes.1": make_node("node-b", "p1")},
            "nodes[node-b].providers[p1]",
            "provider id 'p1' is already used at nodes[node-a].providers[p1]; provider ids are "
            "unique across nodes",
            id="provider-id-across-nodes",
        ),
        pytest.param(
            {
                "nodes.0.providers.1": {
                    "id": "p1",
                    "adapter": "echo",
                    "served_models": ["x"],
                    "capacity": 1,
                }
            },
            "nodes[node-a].providers[p1]",
            "provider id 'p1' is already used at nodes[node-a].providers[p1]",
            id="provider-id-same-node",
        ),
        pytest.param(
            {"models.1": {"id": "echo", "providers": {"p1": "echo-small"}}},
            "models[echo]",
            "duplicate model id 'echo' (2 times)",
            id="model-id",
        ),
        pytest.param(
            {"openai.principal_tokens.1": make_token("cli", seed="second")},
            "openai.principal_tokens[cli]",
            "duplicate token_ref 'cli' (2 times)",
            id="token_ref",
        ),
        pytest.param(
            {"openai.principal_tokens.1": make_token("cli-2", seed="cli")},
            "openai.principal_tokens[cli-2].token_hash_sha256",
            "this hash is already used at openai.principal_tokens[cli].token_hash_sha256",
            id="principal-token-hash",
        ),
        pytest.param(
            {"nodes.0.token_hash_sha256": make_hash("cli")},
            "nodes[node-a].token_hash_sha256",
            "already used at openai.principal_tokens[cli].token_hash_sha256; every node and "
            "principal token needs its own token",
            id="node-hash-equals-principal-hash",
        ),
        pytest.param(
            {"nodes.1": make_node("node-b", "p2", token_hash_sha256=make_hash("node-a"))},
            "nodes[node-b].token_hash_sha256",
            "this hash is already used at nodes[node-a].token_hash_sha256",
            id="node-hashes",
        ),
        pytest.param(
            {"nodes.0.providers.0.served_models": ["echo-small", "echo-small"]},
            f"{P1}.served_models[echo-small]",
            "duplicate served model 'echo-small' (2 times)",
            id="served-models",
        ),
    ],
)
def test_it_requires_unique_ids(changes: dict[str, Any], path: str, fragment: str) -> None:
    assert_issue(make_config_with(changes), path, fragment)


@pytest.mark.parametrize(
    ("changes", "path", "fragment"),
    [
        pytest.param(
            {"nodes.0.providers.0.adapter": "missing"},
            f"{P1}.adapter",
            "names adapter 'missing', which this node does not define (defined: echo)",
            id="unknown-adapter",
        ),
        pytest.param(
            {
                "nodes.1": make_node("node-b", "p2", adapters=[make_http_adapter()]),
                "nodes.0.providers.0.adapter": "http",
            },
            f"{P1}.adapter",
            "names adapter 'http', which this node does not define",
            id="adapter-of-another-node",
        ),
        pytest.param(
            {"models.0.providers": {"p9": "echo-small"}},
            "models[echo].providers[p9]",
            "names provider 'p9', which no node defines",
            id="unknown-provider",
        ),
        pytest.param(
            {"models.0.providers": {"p1": "other"}},
            "models[echo].providers[p1]",
            "served model 'other' is not in that provider's served_models (echo-small)",
            id="served-model-membership",
        ),
    ],
)
def test_it_checks_references(changes: dict[str, Any], path: str, fragment: str) -> None:
    assert_issue(make_config_with(changes), path, fragment)


@pytest.mark.parametrize(
    ("changes", "path", "message"),
    [
        ({"nodes.0.providers.0.capacity": 0}, f"{P1}.capacity", "must be >= 1 (got 0)"),
        ({"nodes.0.providers.0.capacity": -3}, f"{P1}.capacity", "must be >= 1 (got -3)"),
        ({"nodes.0.providers.0.priority": -1}, f"{P1}.priority", "must be >= 0 (got -1)"),
        ({"nodes.0.providers.0.max_queue": -1}, f"{P1}.max_queue", "must be >= 0 (got -1)"),
        ({"queue": {"max_queue": -1}}, "queue.max_queue", "must be >= 0 (got -1)"),
        (
            {"nodes.0.providers.0.queue_timeout_s": 0},
            f"{P1}.queue_timeout_s",
            "must be > 0 (got 0)",
        ),
        (
            {"nodes.0.providers.0.queue_timeout_s": -0.5},
            f"{P1}.queue_timeout_s",
            "must be > 0 (got -0.5)",
        ),
        (
            {"nodes.0.providers.0.queue_timeout_s": 3601},
            f"{P1}.queue_timeout_s",
            "must be <= 3600 (got 3601)",
        ),
        ({"queue": {"queue_timeout_s": 0}}, "queue.queue_timeout_s", "must be > 0 (got 0)"),
        (
            {"queue": {"queue_timeout_s": 3600.5}},
            "queue.queue_timeout_s",
            "must be <= 3600 (got 3600.5)",
        ),
        (
            {"openai.long_context_threshold_tokens": 0},
            "openai.long_context_threshold_tokens",
            "must be >= 1 (got 0)",
        ),
        ({"nodes.0.concurrency": 0}, "nodes[node-a].concurrency", "must be >= 1 (got 0)"),
        (
            {"nodes.0.providers.0.long_context_slots": -1},
            f"{P1}.long_context_slots",
            "must be >= 0 (got -1)",
        ),
        (
            {"nodes.0.providers.0.long_context_slots": 5},
            f"{P1}.long_context_slots",
            "must be <= capacity 4 (got 5); a long request also holds a normal slot",
        ),
        (
            {"nodes.0.adapters.1": make_http_adapter(timeout_s=0)},
            f"{HTTP}.timeout_s",
            "must be > 0 (got 0)",
        ),
        (
            {"nodes.0.adapters.1": make_http_adapter(health_interval_s=7200)},
            f"{HTTP}.health_interval_s",
            "must be <= 3600 (got 7200)",
        ),
        (
            {"nodes.0.adapters.0.token_delay_ms": -1},
            f"{ECHO}.token_delay_ms",
            "must be >= 0 (got -1)",
        ),
        (
            {"nodes.0.adapters.0.token_delay_ms": float("nan")},
            f"{ECHO}.token_delay_ms",
            "must be a number (got nan)",
        ),
        (
            {"nodes.0.providers.0.capacity": -(10**30)},
            f"{P1}.capacity",
            "must be >= 1 (got a very large negative integer)",
        ),
        (
            {"models.0.generation": {"default_max_tokens": 0}},
            "models[echo].generation.default_max_tokens",
            "must be >= 1 (got 0)",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) and "[" not in value else None,
)
def test_it_checks_numeric_bounds(changes: dict[str, Any], path: str, message: str) -> None:
    assert ConfigIssue(path, message) in issues_of(make_config_with(changes))


@pytest.mark.parametrize(
    "changes",
    [
        {"nodes.0.providers.0.capacity": 1},
        {"nodes.0.providers.0.priority": 0},
        {"nodes.0.providers.0.max_queue": 0},
        {"queue": {"max_queue": 0, "queue_timeout_s": 3600}},
        {"nodes.0.providers.0.queue_timeout_s": 0.25},
        {"nodes.0.providers.0.queue_timeout_s": 3600},
        {"nodes.0.providers.0.long_context_slots": 0},
        {"nodes.0.providers.0.long_context_slots": 4},
        {"openai.long_context_threshold_tokens": 1},
        {"nodes.0.concurrency": 1},
        {"nodes.0.adapters.0.token_delay_ms": 10_000},
        {"models.0.generation": {"default_max_tokens": 64, "max_tokens_limit": 64}},
    ],
    ids=lambda changes: ",".join(f"{k}={v}" for k, v in changes.items()),
)
def test_it_accepts_values_on_the_bounds(changes: dict[str, Any]) -> None:
    assert isinstance(load_dict(make_config_with(changes)), EdgeConfig)


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"nodes.0.token_hash_sha256": make_hash("node-a").upper()}, "nodes[node-a]"),
        ({"nodes.0.token_hash_sha256": make_hash("node-a")[:63]}, "nodes[node-a]"),
        ({"nodes.0.token_hash_sha256": make_hash("node-a") + "0"}, "nodes[node-a]"),
        ({"nodes.0.token_hash_sha256": "g" * 64}, "nodes[node-a]"),
        (
            {"openai.principal_tokens.0.token_hash_sha256": make_hash("cli").upper()},
            "openai.principal_tokens[cli]",
        ),
    ],
    ids=["uppercase", "short", "long", "not-hex", "principal-uppercase"],
)
def test_it_requires_lowercase_sha256_hashes(changes: dict[str, Any], path: str) -> None:
    assert_issue(
        make_config_with(changes),
        f"{path}.token_hash_sha256",
        "must be 64 lowercase hex characters (a sha256 digest)",
    )


@pytest.mark.parametrize("admin_listen", ["0.0.0.0:8001", "10.0.0.1:8001", "[::]:8001", "edge:80"])
def test_it_requires_a_loopback_admin_listen(admin_listen: str) -> None:
    assert_issue(
        make_config_with({"edge.admin_listen": admin_listen}),
        "edge.admin_listen",
        f"must be a loopback address such as 127.0.0.1 or [::1] (got '{admin_listen}')",
    )


@pytest.mark.parametrize(
    "admin_listen", ["127.0.0.1:8001", "127.0.0.2:9000", "[::1]:8001", "localhost:8001"]
)
def test_it_accepts_a_loopback_admin_listen(admin_listen: str) -> None:
    config = load_dict(make_config_with({"edge.admin_listen": admin_listen}))

    assert config.edge.admin_listen == admin_listen


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("edge.listen", "8000", "must be host:port, such as 127.0.0.1:8000"),
        ("edge.listen", ":8000", "must be host:port"),
        ("edge.listen", "127.0.0.1:0", "port must be 1-65535"),
        ("edge.listen", "127.0.0.1:70000", "port must be 1-65535"),
        ("edge.listen", "127.0.0.1:http", "port must be 1-65535"),
        ("edge.listen", "127.0.0.1:²", "port must be 1-65535"),
        ("edge.listen", "bad host!:80", "host must be an IP address or a hostname"),
        ("edge.admin_listen", "127.0.0.1", "must be host:port"),
        ("openai.listen", "localhost", "must be host:port"),
        ("edge.listen", 8000, "must be a string (got an integer)"),
    ],
)
def test_it_rejects_a_bad_listen_address(key: str, value: Any, fragment: str) -> None:
    assert_issue(make_config_with({key: value}), key, fragment)


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"nodes.0.adapters.1": make_http_adapter(api_key="sk-abc")}, f"{HTTP}.api_key"),
        ({"nodes.0.adapters.0.api_key": "sk-abc"}, f"{ECHO}.api_key"),
        ({"nodes.0.token": "x"}, "nodes[node-a].token"),
        ({"password": "hunter2"}, "password"),
        ({"edge.password": "hunter2"}, "edge.password"),
        ({"nodes.0.providers.0.password": "hunter2"}, f"{P1}.password"),
        ({"models.0.generation": {"password": 1}}, "models[echo].generation.password"),
        ({"openai.principal_tokens.0.token": "abc"}, "openai.principal_tokens[cli].token"),
        ({"openai.bearer_token": "abc"}, "openai.bearer_token"),
        ({"control_plane": {"url": None, "secret": "s"}}, "control_plane.secret"),
        ({"queue": {"access_key": "AKIA"}}, "queue.access_key"),
        ({"nodes.0.adapters.0.apikey": {"value": "sk"}}, f"{ECHO}.apikey"),
    ],
)
def test_it_rejects_raw_credentials(changes: dict[str, Any], path: str) -> None:
    assert_issue(make_config_with(changes), path, "raw credentials are not allowed in the config")


def test_it_accepts_a_credential_named_by_environment_variable() -> None:
    config = load_dict(make_config_with({"nodes.0.adapters.1": make_http_adapter(api_key_env="X")}))

    assert {a.id: a for a in config.nodes[0].adapters}["http"].api_key_env == "X"


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        (
            {"nodes.0.adapters.1": make_http_adapter(base_url="http://user:pass@10.0.0.5/v1")},
            f"{HTTP}.base_url",
        ),
        (
            {"nodes.0.adapters.1": make_http_adapter(base_url="https://sk-abc@api.example/v1")},
            f"{HTTP}.base_url",
        ),
        ({"control_plane": {"url": "https://u:p@cp.example"}}, "control_plane.url"),
    ],
)
def test_it_rejects_credentials_in_a_url(changes: dict[str, Any], path: str) -> None:
    assert_issue(make_config_with(changes), path, "must not carry credentials")


@pytest.mark.parametrize(
    ("base_url", "fragment"),
    [
        ("ftp://127.0.0.1/v1", "must be an http(s) URL"),
        ("127.0.0.1:9000/v1", "must be an http(s) URL"),
        ("http:///v1", "must be an http(s) URL"),
        ("http://[::1/v1", "must be an http(s) URL"),
        ("http://127.0.0.1:99999/v1", "must be an http(s) URL"),
        ("http://127.0.0.1:9000/v1?key=x", "must not have a query or fragment"),
    ],
)
def test_it_rejects_a_bad_base_url(base_url: str, fragment: str) -> None:
    changes = {"nodes.0.adapters.1": make_http_adapter(base_url=base_url)}

    assert_issue(make_config_with(changes), f"{HTTP}.base_url", fragment)


@pytest.mark.parametrize(
    ("changes", "path", "message"),
    [
        (
            {"nodes.0.providers.0.capacity": "4"},
            f"{P1}.capacity",
            "must be an integer (got a string)",
        ),
        (
            {"nodes.0.providers.0.capacity": True},
            f"{P1}.capacity",
            "must be an integer (got a boolean)",
        ),
        (
            {"nodes.0.providers.0.capacity": 4.0},
            f"{P1}.capacity",
            "must be an integer (got a number)",
        ),
        ({"nodes.0.providers.0.capacity": None}, f"{P1}.capacity", "must be an integer (got null)"),
        (
            {"nodes.0.providers.0.enabled": "yes"},
            f"{P1}.enabled",
            "must be true or false (got a string)",
        ),
        (
            {"nodes.0.providers.0.queue_timeout_s": "30"},
            f"{P1}.queue_timeout_s",
            "must be a number (got a string)",
        ),
        (
            {"openai.require_auth": 1},
            "openai.require_auth",
            "must be true or false (got an integer)",
        ),
        (
            {"nodes.0.adapters": {"id": "echo", "type": "echo"}},
            "nodes[node-a].adapters",
            "must be a list (got a mapping)",
        ),
        ({"nodes": {"node-a": {}}}, "nodes", "must be a list (got a mapping)"),
        ({"edge": ["edge-test"]}, "edge", "must be a mapping (got a list)"),
        ({"edge": None}, "edge", "must be a mapping (got null)"),
        ({"queue": [64]}, "queue", "must be a mapping (got a list)"),
        ({"queue": 0}, "queue", "must be a mapping (got an integer)"),
        ({"openai": []}, "openai", "must be a mapping (got a list)"),
        ({"openai": ""}, "openai", "must be a mapping (got a string)"),
        ({"control_plane": False}, "control_plane", "must be a mapping (got a boolean)"),
        ({"models.0.generation": []}, "models[echo].generation", "must be a mapping (got a list)"),
        ({"nodes.0": "node-a"}, "nodes[0]", "must be a mapping (got a string)"),
        (
            {"nodes.0.providers.0": ["p1"]},
            "nodes[node-a].providers[0]",
            "must be a mapping (got a list)",
        ),
        (
            {"openai.principal_tokens.0": "cli"},
            "openai.principal_tokens[0]",
            "must be a mapping (got a string)",
        ),
        (
            {"models.0.generation": {"max_tokens_limit": "8k"}},
            "models[echo].generation.max_tokens_limit",
            "must be an integer (got a string)",
        ),
        (
            {"nodes.0.providers.0.served_models": "echo-small"},
            f"{P1}.served_models",
            "must be a non-empty list of model names",
        ),
        (
            {"nodes.0.providers.0.served_models": []},
            f"{P1}.served_models",
            "must be a non-empty list of model names",
        ),
        (
            {"models.0.providers": ["p1"]},
            "models[echo].providers",
            "must map at least one provider id to its served model name",
        ),
        (
            {"models.0.providers": {}},
            "models[echo].providers",
            "must map at least one provider id to its served model name",
        ),
        ({"edge.id": 7}, "edge.id", "must be a string (got an integer)"),
    ],
)
def test_it_rejects_wrong_types(changes: dict[str, Any], path: str, message: str) -> None:
    assert ConfigIssue(path, message) in issues_of(make_config_with(changes))


@pytest.mark.parametrize(
    ("deleted", "path"),
    [
        ("version", "version"),
        ("edge", "edge"),
        ("nodes", "nodes"),
        ("edge.id", "edge.id"),
        ("nodes.0.id", "nodes[0].id"),
        ("nodes.0.token_hash_sha256", "nodes[node-a].token_hash_sha256"),
        ("nodes.0.adapters.0.id", "nodes[node-a].adapters[0].id"),
        ("nodes.0.adapters.0.type", f"{ECHO}.type"),
        ("nodes.0.providers.0.id", "nodes[node-a].providers[0].id"),
        ("nodes.0.providers.0.adapter", f"{P1}.adapter"),
        ("nodes.0.providers.0.served_models", f"{P1}.served_models"),
        ("nodes.0.providers.0.capacity", f"{P1}.capacity"),
        ("models.0.id", "models[0].id"),
        ("models.0.providers", "models[echo].providers"),
        ("openai.principal_tokens.0.token_ref", "openai.principal_tokens[0].token_ref"),
        (
            "openai.principal_tokens.0.token_hash_sha256",
            "openai.principal_tokens[cli].token_hash_sha256",
        ),
        ("openai.principal_tokens.0.principal_ref", "openai.principal_tokens[cli].principal_ref"),
    ],
)
def test_it_names_each_missing_required_key(deleted: str, path: str) -> None:
    assert ConfigIssue(path, "is required") in issues_of(make_config_with({deleted: DELETE}))


@pytest.mark.parametrize("key", ["openai", "queue", "control_plane", "models.0.generation"])
def test_it_reads_a_null_optional_section_as_all_defaults(key: str) -> None:
    assert (
        load_dict(make_config_with({key: None})).revision
        == load_dict(make_config_with({key: {}})).revision
    )


def test_it_requires_a_base_url_for_an_openai_http_adapter() -> None:
    adapter = make_http_adapter()
    del adapter["base_url"]

    assert_issue(
        make_config_with({"nodes.0.adapters.1": adapter}),
        f"{HTTP}.base_url",
        "is required for an openai_http adapter",
    )


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("- version: 1\n- edge: {}\n", "a list"),
        ("just a string\n", "a string"),
        ("42\n", "an integer"),
        ("", "null"),
        ("# only a comment\n", "null"),
        ("---\n", "null"),
    ],
    ids=["list", "string", "integer", "empty", "comment-only", "empty-document"],
)
def test_it_rejects_a_root_that_is_not_a_mapping(text: str, kind: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_text(text)

    assert caught.value.issues == [ConfigIssue("", f"must be a mapping (got {kind})")]
    assert str(caught.value) == f"must be a mapping (got {kind})"


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (2, "must be 1 (got 2)"),
        (0, "must be 1 (got 0)"),
        ("1", "must be an integer (got a string)"),
        (1.0, "must be an integer (got a number)"),
        (True, "must be an integer (got a boolean)"),
    ],
)
def test_it_requires_version_1(version: Any, message: str) -> None:
    assert ConfigIssue("version", message) in issues_of(make_config_with({"version": version}))


@pytest.mark.parametrize("adapter_type", ["vllm", "ollama", "openai", "openai_compatible"])
def test_it_normalizes_adapter_type_aliases(adapter_type: str) -> None:
    changes = {"nodes.0.adapters.1": make_http_adapter(type=adapter_type)}

    config = load_dict(make_config_with(changes))

    assert {a.id: a for a in config.nodes[0].adapters}["http"].type == "openai_http"
    canonical_adapters = config.canonical["nodes"][0]["adapters"]
    assert [a["type"] for a in canonical_adapters] == ["echo", "openai_http"]


def test_it_rejects_an_unknown_adapter_type() -> None:
    assert_issue(
        make_config_with({"nodes.0.adapters.0.type": "grpc"}),
        f"{ECHO}.type",
        "must be one of echo, ollama, openai, openai_compatible, openai_http, vllm (got 'grpc')",
    )


@pytest.mark.parametrize(
    ("base_url", "normalized"),
    [
        ("http://127.0.0.1:9000/v1/", "http://127.0.0.1:9000/v1"),
        ("http://127.0.0.1:9000/v1//", "http://127.0.0.1:9000/v1"),
        ("https://api.example.com/", "https://api.example.com"),
        ("http://127.0.0.1:9000/v1", "http://127.0.0.1:9000/v1"),
    ],
)
def test_it_strips_trailing_slashes_from_base_url(base_url: str, normalized: str) -> None:
    config = load_dict(
        make_config_with({"nodes.0.adapters.1": make_http_adapter(base_url=base_url)})
    )

    assert {a.id: a for a in config.nodes[0].adapters}["http"].base_url == normalized
    assert config.canonical["nodes"][0]["adapters"][1]["base_url"] == normalized


def test_it_strips_the_trailing_slash_from_the_control_plane_url() -> None:
    config = load_dict(make_config_with({"control_plane": {"url": "https://cp.example/api/"}}))

    assert config.control_plane.url == "https://cp.example/api"


@pytest.mark.parametrize(
    ("adapter", "path", "key", "adapter_type"),
    [
        ({"id": "echo", "type": "echo", "base_url": "http://x/v1"}, ECHO, "base_url", "echo"),
        ({"id": "echo", "type": "echo", "api_key_env": "KEY"}, ECHO, "api_key_env", "echo"),
        ({"id": "echo", "type": "echo", "timeout_s": 5}, ECHO, "timeout_s", "echo"),
        (make_http_adapter(token_delay_ms=5), HTTP, "token_delay_ms", "openai_http"),
        (make_http_adapter(type="vllm", token_delay_ms=5), HTTP, "token_delay_ms", "openai_http"),
    ],
)
def test_it_rejects_keys_of_another_adapter_type(
    adapter: dict[str, Any], path: str, key: str, adapter_type: str
) -> None:
    index = 0 if path == ECHO else 1
    assert_issue(
        make_config_with({f"nodes.0.adapters.{index}": adapter}),
        f"{path}.{key}",
        f"does not apply to adapter type '{adapter_type}'",
    )


def test_it_rejects_a_generation_default_above_the_limit() -> None:
    changes = {"models.0.generation": {"default_max_tokens": 200, "max_tokens_limit": 100}}

    assert ConfigIssue(
        "models[echo].generation.default_max_tokens", "must be <= max_tokens_limit 100 (got 200)"
    ) in issues_of(make_config_with(changes))


def test_it_reports_every_independent_problem_at_once() -> None:
    data = make_config_with(
        {
            "version": 2,
            "edge.admin_listen": "0.0.0.0:8001",
            "nodes.0.providers.0.capacity": 0,
            "nodes.0.adapters.0.api_key": "sk-abc",
            "nodes.1": make_node("node-b", "p2", concurrency=0),
            "nodes.1.providers.0.capcity": 2,
            "models.1": {"id": "other", "providers": {"p9": "x"}},
            "openai.principal_tokens.0.token_hash_sha256": "ABC",
        }
    )
    del data["nodes"][1]["providers"][0]["capacity"]

    with pytest.raises(ConfigError) as caught:
        load_dict(data)

    expected = {
        "version: must be 1 (got 2)",
        "edge.admin_listen: must be a loopback address such as 127.0.0.1 or [::1] "
        "(got '0.0.0.0:8001')",
        "nodes[node-a].providers[p1].capacity: must be >= 1 (got 0)",
        "nodes[node-a].adapters[echo].api_key: raw credentials are not allowed in the config; "
        "keep the secret on the Node and name its environment variable with `api_key_env`, "
        "or store a sha256 hash",
        "nodes[node-b].concurrency: must be >= 1 (got 0)",
        "nodes[node-b].providers[p2].capcity: unknown key; did you mean 'capacity'?",
        "nodes[node-b].providers[p2].capacity: is required",
        "models[other].providers[p9]: names provider 'p9', which no node defines",
        "openai.principal_tokens[cli].token_hash_sha256: must be 64 lowercase hex characters "
        "(a sha256 digest)",
    }
    lines = str(caught.value).splitlines()
    assert len(lines) == len(caught.value.issues)
    assert lines == [str(issue) for issue in caught.value.issues]
    assert set(lines) == expected


@pytest.mark.parametrize(
    ("changes", "issue"),
    [
        (
            {"": 1},
            ConfigIssue(
                "''",
                "unknown key; known keys: version, edge, control_plane, openai, queue, failover, "
                "passive_health, nodes, models",
            ),
        ),
        (
            {"edge.": 1},
            ConfigIssue(
                "edge.''", "unknown key; known keys: id, listen, admin_listen, bootstrap_path, ha"
            ),
        ),
        (
            {"edge.a\rb": 1},
            ConfigIssue(
                "edge.a\\rb",
                "unknown key; known keys: id, listen, admin_listen, bootstrap_path, ha",
            ),
        ),
        (
            {"nodes.0.id": "node\na"},
            ConfigIssue("nodes[node\\na].id", f"must be {ID_EXPECTED} (got 'node\\na')"),
        ),
        (
            {"nodes.0.providers.0.id": "p\u2028"},
            ConfigIssue(
                "nodes[node-a].providers[p\\u2028].id", f"must be {ID_EXPECTED} (got 'p\\u2028')"
            ),
        ),
    ],
    ids=[
        "empty-root-key",
        "empty-nested-key",
        "carriage-return",
        "newline-in-id",
        "line-separator",
    ],
)
def test_it_keeps_every_issue_visible_and_on_one_line(
    changes: dict[str, Any], issue: ConfigIssue
) -> None:
    issues = issues_of(make_config_with(changes))

    assert issue in issues
    assert len(str(ConfigError(issues)).splitlines()) == len(issues)


def test_it_reports_a_key_that_is_no_string_at_the_root_as_a_whole_document_problem() -> None:
    issues = issues_of({**make_config_dict(), 1: "x"})

    assert issues == [ConfigIssue("", "keys must be strings (got 1)")]


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"edge.admin_listen": "127.0.0.1:8000"}, "edge.admin_listen"),
        ({"openai.listen": "0.0.0.0:8000"}, "openai.listen"),
    ],
)
def test_it_requires_a_port_per_listener(changes: dict[str, Any], path: str) -> None:
    assert_issue(
        make_config_with({"edge.listen": "127.0.0.1:8000", **changes}),
        path,
        "port 8000 is already used by edge.listen",
    )
