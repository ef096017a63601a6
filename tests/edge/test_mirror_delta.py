"""`import_config(..., base=...)`: a sync of only what changed from the config the mirror holds
does what a full sync does, and reads nothing else."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import yaml
from django.db import connection, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge.config import EdgeConfig, load_config_text
from edge.config.sharing import sharing_unchanged
from edge.mirror import ImportReport, import_config
from edge.models import ConfigRevision, PrincipalToken
from nodes.models import Adapter, Node
from providers.models import CatalogModel, Provider, Route

pytestmark = pytest.mark.django_db

# No edit touches this node or the model routed to it: a delta sync never reads their rows.
IDLE_NODE, IDLE_MODEL = "node-idle", "idle"
IDLE_ALIAS = f"{IDLE_NODE}-alias"

Config = dict[str, Any]


def digest(seed: str) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()


def provider(provider_id: str, adapter: str) -> dict[str, Any]:
    return {
        "id": provider_id,
        "adapter": adapter,
        "served_models": ["small", "large"],
        "capacity": 4,
    }


def node(node_id: str, provider_count: int) -> dict[str, Any]:
    return {
        "id": node_id,
        "alias": f"{node_id}-alias",
        "token_hash_sha256": digest(node_id),
        "adapters": [
            {"id": "fast", "type": "echo"},
            {"id": "slow", "type": "echo", "token_delay_ms": 20},
        ],
        "providers": [
            provider(f"{node_id}-p{j}", "slow" if j == 0 else "fast") for j in range(provider_count)
        ],
    }


def base_config() -> Config:
    """Three nodes of three providers, the idle node, four models, two principal tokens."""
    return {
        "version": 1,
        "edge": {"id": "edge-delta", "listen": "127.0.0.1:8000", "admin_listen": "127.0.0.1:8001"},
        "openai": {
            "require_auth": True,
            "principal_tokens": [
                {
                    "token_ref": f"cli-{i}",
                    "token_hash_sha256": digest(f"cli-{i}"),
                    "principal_ref": "team",
                }
                for i in range(2)
            ],
        },
        "nodes": [*(node(f"node-{i}", 3) for i in range(3)), node(IDLE_NODE, 1)],
        "models": [
            {
                "id": "chat",
                "providers": {"node-0-p0": "small", "node-1-p0": "small", "node-2-p1": "small"},
                "generation": {"default_max_tokens": 256, "max_tokens_limit": 1024},
            },
            {"id": "vendor/long", "providers": {"node-0-p1": "large", "node-1-p2": "large"}},
            {"id": "spare", "providers": {"node-2-p2": "small"}},
            {"id": IDLE_MODEL, "providers": {f"{IDLE_NODE}-p0": "small"}},
        ],
    }


# Edits of a config, each keeping it valid: ``pick`` chooses what they edit, ``new`` is a name
# no other edit uses (ids, aliases and token hashes are unique in a config).


def nodes(cfg: Config) -> list[dict[str, Any]]:
    return [n for n in cfg["nodes"] if n["id"] != IDLE_NODE]


def providers(cfg: Config) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(n, p) for n in nodes(cfg) for p in n["providers"]]


def models(cfg: Config) -> list[dict[str, Any]]:
    return [m for m in cfg["models"] if m["id"] != IDLE_MODEL]


def drop_routes(cfg: Config, gone: set[str]) -> None:
    """Routes to the ``gone`` providers removed, and the models left without a route."""
    for m in cfg["models"]:
        m["providers"] = {p: served for p, served in m["providers"].items() if p not in gone}
    cfg["models"] = [m for m in cfg["models"] if m["providers"]]


def add_node(cfg: Config, pick: random.Random, new: str) -> None:
    new = node(f"node-{new}", 2)
    cfg["nodes"].append(new)
    if models(cfg):
        pick.choice(models(cfg))["providers"][new["providers"][0]["id"]] = "large"


def remove_node(cfg: Config, pick: random.Random, new: str) -> None:
    if nodes(cfg):
        gone = pick.choice(nodes(cfg))
        cfg["nodes"].remove(gone)
        drop_routes(cfg, {p["id"] for p in gone["providers"]})


def change_node(cfg: Config, pick: random.Random, new: str) -> None:
    if nodes(cfg):
        target = pick.choice(nodes(cfg))
        target["alias"] = f"alias-{new}"
        target["token_hash_sha256"] = digest(f"token-{new}")


def add_provider(cfg: Config, pick: random.Random, new: str) -> None:
    if nodes(cfg) and models(cfg):
        target = pick.choice(nodes(cfg))
        new = provider(f"provider-{new}", target["adapters"][0]["id"])
        target["providers"].append(new)
        pick.choice(models(cfg))["providers"][new["id"]] = "small"


def remove_provider(cfg: Config, pick: random.Random, new: str) -> None:
    if providers(cfg):
        owner, gone = pick.choice(providers(cfg))
        owner["providers"].remove(gone)
        drop_routes(cfg, {gone["id"]})


def change_capacity(cfg: Config, pick: random.Random, new: str) -> None:
    if providers(cfg):
        _, target = pick.choice(providers(cfg))
        target["capacity"] += 1


def move_to_other_adapter(cfg: Config, pick: random.Random, new: str) -> None:
    if providers(cfg):
        owner, target = pick.choice(providers(cfg))
        others = [a["id"] for a in owner["adapters"] if a["id"] != target["adapter"]]
        if others:
            target["adapter"] = others[0]


def move_to_other_node(cfg: Config, pick: random.Random, new: str) -> None:
    if providers(cfg) and len(nodes(cfg)) > 1:
        owner, target = pick.choice(providers(cfg))
        destination = pick.choice([n for n in nodes(cfg) if n is not owner])
        owner["providers"].remove(target)
        destination["providers"].append({**target, "adapter": destination["adapters"][-1]["id"]})


def remove_adapter(cfg: Config, pick: random.Random, new: str) -> None:
    """An adapter goes; its providers move to the node's other one."""
    owners = [n for n in nodes(cfg) if len(n["adapters"]) > 1]
    if owners:
        owner = pick.choice(owners)
        gone, kept = owner["adapters"][0], owner["adapters"][1]
        owner["adapters"].remove(gone)
        for p in owner["providers"]:
            p["adapter"] = kept["id"]


def change_adapter_options(cfg: Config, pick: random.Random, new: str) -> None:
    if nodes(cfg):
        pick.choice(pick.choice(nodes(cfg))["adapters"])["token_delay_ms"] = 35


def rename_model(cfg: Config, pick: random.Random, new: str) -> None:
    if models(cfg):
        pick.choice(models(cfg))["id"] = f"renamed-{new}"


def remove_model(cfg: Config, pick: random.Random, new: str) -> None:
    if models(cfg):
        cfg["models"].remove(pick.choice(models(cfg)))


def add_model(cfg: Config, pick: random.Random, new: str) -> None:
    if providers(cfg):
        _, target = pick.choice(providers(cfg))
        cfg["models"].append({"id": f"model-{new}", "providers": {target["id"]: "small"}})


def change_generation(cfg: Config, pick: random.Random, new: str) -> None:
    if models(cfg):
        pick.choice(models(cfg))["generation"] = {"default_max_tokens": 64}


def add_route(cfg: Config, pick: random.Random, new: str) -> None:
    if models(cfg) and providers(cfg):
        _, target = pick.choice(providers(cfg))
        pick.choice(models(cfg))["providers"][target["id"]] = "large"


def remove_route(cfg: Config, pick: random.Random, new: str) -> None:
    routed = [m for m in models(cfg) if len(m["providers"]) > 1]
    if routed:
        target = pick.choice(routed)
        del target["providers"][pick.choice(sorted(target["providers"]))]


def change_served_model(cfg: Config, pick: random.Random, new: str) -> None:
    if models(cfg):
        target = pick.choice(models(cfg))
        provider_id = pick.choice(sorted(target["providers"]))
        served = target["providers"][provider_id]
        target["providers"][provider_id] = "large" if served == "small" else "small"


def add_token(cfg: Config, pick: random.Random, new: str) -> None:
    ref = f"cli-{new}"
    cfg["openai"]["principal_tokens"].append(
        {"token_ref": ref, "token_hash_sha256": digest(ref), "principal_ref": "new"}
    )


def remove_token(cfg: Config, pick: random.Random, new: str) -> None:
    tokens = cfg["openai"]["principal_tokens"]
    if tokens:
        tokens.remove(pick.choice(tokens))


def change_token_hash(cfg: Config, pick: random.Random, new: str) -> None:
    tokens = cfg["openai"]["principal_tokens"]
    if tokens:
        pick.choice(tokens)["token_hash_sha256"] = digest(f"rotated-{new}")


def swap_token_hashes(cfg: Config, pick: random.Random, new: str) -> None:
    """Two tokens trade hashes: each takes a unique value the other still holds."""
    tokens = cfg["openai"]["principal_tokens"]
    if len(tokens) >= 2:
        first, second = pick.sample(tokens, 2)
        first["token_hash_sha256"], second["token_hash_sha256"] = (
            second["token_hash_sha256"],
            first["token_hash_sha256"],
        )


def rename_token(cfg: Config, pick: random.Random, new: str) -> None:
    """The token's hash moves to a new ref: the new row takes the unique value the old one frees."""
    tokens = cfg["openai"]["principal_tokens"]
    if tokens:
        pick.choice(tokens)["token_ref"] = f"cli-{new}"


Edit = Callable[[Config, random.Random, str], None]
EDITS: list[Edit] = [
    add_node,
    remove_node,
    change_node,
    add_provider,
    remove_provider,
    change_capacity,
    move_to_other_adapter,
    move_to_other_node,
    remove_adapter,
    change_adapter_options,
    rename_model,
    remove_model,
    add_model,
    change_generation,
    add_route,
    remove_route,
    change_served_model,
    add_token,
    remove_token,
    change_token_hash,
    swap_token_hashes,
    rename_token,
]


def text_of(cfg: Config) -> str:
    return yaml.safe_dump(cfg, sort_keys=False)


def full_sync(text: str) -> tuple[EdgeConfig, ImportReport]:
    config = load_config_text(text)
    return config, import_config(config, text, source="test")


@contextmanager
def rolled_back() -> Iterator[None]:
    with transaction.atomic():
        yield
        transaction.set_rollback(True)


def mirror_rows() -> dict[str, list[tuple[Any, ...]]]:
    """Every mirror row by natural key: pks differ between two syncs, what they hold must not."""

    def rows(model: type[Any], *columns: str) -> list[tuple[Any, ...]]:
        return sorted(model.objects.values_list(*columns), key=repr)

    return {
        "nodes": rows(Node, "node_id", "alias", "token_hash_sha256", "concurrency"),
        "adapters": rows(Adapter, "node__node_id", "adapter_id", "type", "options"),
        "providers": rows(
            Provider,
            "provider_id",
            "node__node_id",
            "adapter__node__node_id",
            "adapter__adapter_id",
            "served_models",
            "enabled",
            "capacity",
            "long_context_slots",
            "priority",
            "max_queue",
            "queue_timeout_s",
        ),
        "models": rows(CatalogModel, "model_id", "default_max_tokens", "max_tokens_limit"),
        "routes": rows(Route, "model__model_id", "provider__provider_id", "served_model"),
        "tokens": rows(PrincipalToken, "token_ref", "token_hash_sha256", "principal_ref", "alias"),
        "revisions": rows(ConfigRevision, "revision", "yaml_text", "source", "active"),
    }


def outcome(report: ImportReport) -> tuple[list[str], bool]:
    return report.lines(), report.revision_activated


def set_idle_node_alias(alias: str) -> None:
    Node.objects.filter(node_id=IDLE_NODE).update(alias=alias)


def idle_node_alias() -> str:
    return Node.objects.get(node_id=IDLE_NODE).alias


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    edits=st.lists(st.sampled_from(EDITS), min_size=1, max_size=4),
    pick=st.randoms(use_true_random=False),
    shared=st.booleans(),
)
def test_a_delta_sync_does_what_a_full_sync_does(
    edits: list[Edit], pick: random.Random, shared: bool
) -> None:
    edited = base_config()
    for step, edit in enumerate(edits):
        edit(edited, pick, f"e{step}")
    base_text, text = text_of(base_config()), text_of(edited)
    candidate = load_config_text(text)
    with rolled_back():
        base, _ = full_sync(base_text)
        if shared:  # as a refresh passes it: its unchanged nodes and models are base's
            candidate = sharing_unchanged(candidate, base)
        with rolled_back():
            full = import_config(candidate, text, source="test")
            expected = mirror_rows()
        # Outside the delta: a full sync would put it back, a delta sync never reads it.
        set_idle_node_alias("edited")

        delta = import_config(candidate, text, source="test", base=base)

        connection.check_constraints()  # the foreign keys, checked at commit otherwise
        assert outcome(delta) == outcome(full)
        assert idle_node_alias() == "edited"
        set_idle_node_alias(IDLE_ALIAS)
        assert mirror_rows() == expected


def test_an_unchanged_config_reads_only_the_revision_and_the_tokens(django_assert_num_queries):
    text = text_of(base_config())
    base, _ = full_sync(text)

    # The savepoint, the active revision (locked), the principal tokens (read whole), release.
    with django_assert_num_queries(4):
        report = import_config(load_config_text(text), text, source="test", base=base)

    assert not report.changed


def test_a_dry_run_of_a_delta_reports_and_rolls_back():
    base, _ = full_sync(text_of(base_config()))
    edited = base_config()
    edited["nodes"][0]["providers"][0]["capacity"] = 5
    before = mirror_rows()

    text = text_of(edited)
    report = import_config(load_config_text(text), text, source="test", dry_run=True, base=base)

    assert report.lines() == ["update provider node-0-p0 (capacity: 4 -> 5)"]
    assert mirror_rows() == before


def test_it_syncs_every_row_when_the_mirror_does_not_hold_base():
    """Another sync since ``base`` (or none at all): the mirror may hold anything."""
    base_text = text_of(base_config())
    base = load_config_text(base_text)
    other = base_config()
    other["nodes"][0]["providers"][0]["capacity"] = 5
    full_sync(text_of(other))
    set_idle_node_alias("edited")

    report = import_config(base, base_text, source="test", base=base)

    assert report.updated[0] == f"node {IDLE_NODE} (alias: 'edited' -> '{IDLE_ALIAS}')"
    assert report.updated[1] == "provider node-0-p0 (capacity: 5 -> 4)"
    assert len(report.updated) == 2


def test_it_syncs_every_row_into_an_empty_mirror():
    text = text_of(base_config())
    base = load_config_text(text)

    report = import_config(base, text, source="test", base=base)

    rows = mirror_rows()
    assert len(report.created) == sum(len(rows[name]) for name in rows if name != "revisions")
    assert ConfigRevision.objects.get(active=True).revision == base.revision
