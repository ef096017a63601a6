"""Turning a validated Edge config into the pool's snapshot."""

from __future__ import annotations

import pytest

from bench.fleet_config import fleet_yaml, one_change
from edge.config import load_config_text
from edge.config.schema import (
    ControlPlane,
    EdgeConfig,
    EdgeSection,
    Generation,
    Model,
    Node,
    OpenAISection,
    Provider,
    QueueDefaults,
    frozen_mapping,
)
from edge.config.sharing import sharing_unchanged
from edge.dispatch import ModelSpec, PoolSnapshot, ProviderSpec, snapshot_from_config
from nodes.wire import AdapterSpec
from tests.edge.dispatch.pool_helpers import make_provider


def make_config_provider(provider_id: str, **overrides: object) -> Provider:
    values: dict = {
        "id": provider_id,
        "adapter": "vllm",
        "served_models": ("llama-8b", "llama-70b"),
        "enabled": True,
        "capacity": 4,
        "long_context_slots": 1,
        "priority": 10,
        "max_queue": 32,
        "queue_timeout_s": 12.5,
    }
    values.update(overrides)
    return Provider(**values)


def make_config(nodes: tuple[Node, ...], models: tuple[Model, ...]) -> EdgeConfig:
    return EdgeConfig(
        version=1,
        edge=EdgeSection("edge-test", "127.0.0.1:8000", "127.0.0.1:8001", "var/bootstrap"),
        control_plane=ControlPlane(url=None),
        openai=OpenAISection(
            listen=None,
            long_context_threshold_tokens=64_000,
            require_auth=True,
            principal_tokens=(),
        ),
        queue=QueueDefaults(max_queue=64, queue_timeout_s=30.0),
        nodes=nodes,
        models=models,
        canonical={},
        revision="test",
    )


def make_node(node_id: str, providers: tuple[Provider, ...]) -> Node:
    return Node(
        id=node_id,
        alias=None,
        token_hash_sha256="0" * 64,
        concurrency=8,
        adapters=(AdapterSpec(id="vllm", type="openai_http", base_url="http://127.0.0.1:9000/v1"),),
        providers=providers,
    )


def test_it_converts_providers_with_their_node_and_resolved_queue_settings() -> None:
    config = make_config(
        nodes=(
            make_node("gpu-1", (make_config_provider("big"),)),
            make_node("gpu-2", (make_config_provider("small", long_context_slots=None),)),
        ),
        models=(),
    )

    snapshot = snapshot_from_config(config)

    assert snapshot.providers == (
        ProviderSpec(
            id="big",
            node_id="gpu-1",
            adapter_id="vllm",
            served_models=("llama-8b", "llama-70b"),
            enabled=True,
            capacity=4,
            long_context_slots=1,
            priority=10,
            max_queue=32,
            queue_timeout_s=12.5,
        ),
        ProviderSpec(
            id="small",
            node_id="gpu-2",
            adapter_id="vllm",
            served_models=("llama-8b", "llama-70b"),
            enabled=True,
            capacity=4,
            long_context_slots=None,
            priority=10,
            max_queue=32,
            queue_timeout_s=12.5,
        ),
    )
    assert snapshot.long_context_threshold_tokens == 64_000


def test_it_converts_model_routes_and_ignores_generation_policy() -> None:
    config = make_config(
        nodes=(make_node("gpu-1", (make_config_provider("big"), make_config_provider("b2"))),),
        models=(
            Model(
                id="llama",
                providers=frozen_mapping({"big": "llama-70b", "b2": "llama-8b"}),
                generation=Generation(default_max_tokens=512, max_tokens_limit=4096),
            ),
        ),
    )

    snapshot = snapshot_from_config(config)

    assert [m.id for m in snapshot.models] == ["llama"]
    assert dict(snapshot.models[0].routes) == {"big": "llama-70b", "b2": "llama-8b"}


@pytest.mark.parametrize(
    ("providers", "models", "message"),
    [
        ((make_provider("p1"), make_provider("p1")), (), "provider ids must be unique"),
        (
            (make_provider("p1"),),
            (ModelSpec("m", {"p1": "x"}), ModelSpec("m", {"p1": "x"})),
            "model ids must be unique",
        ),
        ((make_provider("p1"),), (ModelSpec("m", {"p9": "x"}),), "unknown providers"),
    ],
)
def test_it_rejects_an_inconsistent_snapshot(
    providers: tuple[ProviderSpec, ...], models: tuple[ModelSpec, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        PoolSnapshot(providers, models, 1000)


def test_built_over_the_config_in_force_an_unchanged_node_keeps_its_specs() -> None:
    running = load_config_text(fleet_yaml(12))
    previous = snapshot_from_config(running)
    candidate = sharing_unchanged(load_config_text(one_change(fleet_yaml(12))), running)

    snapshot = snapshot_from_config(candidate, previous, running)

    assert snapshot == snapshot_from_config(candidate)  # the same as one built afresh
    old = {spec.id: spec for spec in previous.providers}
    moved = [spec for spec in snapshot.providers if spec is not old[spec.id]]
    assert [spec.id for spec in moved] == ["node-00000-p0"]  # the one change
    assert moved[0].capacity != old["node-00000-p0"].capacity
    assert snapshot.delta is not None and snapshot.delta.providers == tuple(moved)
