from __future__ import annotations

import hashlib
import re

import pytest
import yaml
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction

from edge.config import load_config_text
from edge.mirror import import_config
from edge.models import ConfigRevision, PrincipalToken
from nodes.models import Adapter, Node
from providers.models import CatalogModel, Provider, Route

pytestmark = pytest.mark.django_db


def mirror_counts() -> dict[str, int]:
    return {
        "nodes": Node.objects.count(),
        "adapters": Adapter.objects.count(),
        "providers": Provider.objects.count(),
        "models": CatalogModel.objects.count(),
        "routes": Route.objects.count(),
        "tokens": PrincipalToken.objects.count(),
        "revisions": ConfigRevision.objects.count(),
    }


def run_import(text: str, dry_run: bool = False):
    return import_config(load_config_text(text), text, source="test", dry_run=dry_run)


def fleet(nodes: int, capacity: int = 4) -> str:
    """``nodes`` echo nodes with one provider each, all serving one model."""
    return yaml.safe_dump(
        {
            "version": 1,
            "edge": {
                "id": "edge-fleet",
                "listen": "127.0.0.1:8000",
                "admin_listen": "127.0.0.1:8001",
            },
            "nodes": [
                {
                    "id": f"node-{i}",
                    "token_hash_sha256": hashlib.sha256(f"node-{i}".encode()).hexdigest(),
                    "adapters": [{"id": "echo", "type": "echo"}],
                    "providers": [
                        {
                            "id": f"echo-{i}",
                            "adapter": "echo",
                            "served_models": ["echo-small"],
                            "capacity": capacity,
                        }
                    ],
                }
                for i in range(nodes)
            ],
            "models": [
                {
                    "id": "vendor/echo",
                    "providers": {f"echo-{i}": "echo-small" for i in range(nodes)},
                }
            ],
        }
    )


def test_it_creates_every_object_and_activates_the_revision(default_config_text):
    report = run_import(default_config_text)

    assert mirror_counts() == {
        "nodes": 1,
        "adapters": 2,
        "providers": 3,
        "models": 2,
        "routes": 5,
        "tokens": 1,
        "revisions": 1,
    }
    assert "provider echo-a" in report.created
    provider = Provider.objects.select_related("node", "adapter").get(provider_id="echo-overflow")
    assert (provider.node.node_id, provider.adapter.adapter_id) == ("node-local", "echo-slow")
    assert (provider.capacity, provider.priority, provider.max_queue) == (2, 50, 16)
    assert provider.queue_timeout_s == 30.0
    assert Route.objects.get(model__model_id="echo-long", provider=provider).served_model == (
        "echo-large"
    )
    active = ConfigRevision.objects.get(active=True)
    assert active.revision == report.revision
    assert active.yaml_text == default_config_text


def test_it_is_idempotent(default_config_text):
    run_import(default_config_text)
    before = mirror_counts()

    report = run_import(default_config_text)

    assert not report.changed
    assert report.lines() == []
    assert mirror_counts() == before


def test_it_updates_and_deletes(default_config_text):
    run_import(default_config_text)
    edited = default_config_text.replace("capacity: 2", "capacity: 3").replace(
        "echo-b: echo-small, ", ""
    )

    report = run_import(edited)

    assert report.updated == ["provider echo-overflow (capacity: 2 -> 3)"]
    assert report.deleted == ["route echo/echo-b"]
    assert Provider.objects.get(provider_id="echo-overflow").capacity == 3
    assert ConfigRevision.objects.filter(active=True).count() == 1
    assert ConfigRevision.objects.get(active=True).revision == report.revision


def test_it_replaces_one_config_with_another(default_config_text, pool_config_text):
    run_import(default_config_text)

    report = run_import(pool_config_text)

    assert "node node-local" in report.deleted
    assert "route echo/echo-a" in report.deleted
    assert set(Node.objects.values_list("node_id", flat=True)) == {"gpu-a", "gpu-b", "cloud"}
    adapter = Adapter.objects.get(adapter_id="vllm")
    assert adapter.type == "openai_http"
    assert adapter.options["base_url"] == "http://127.0.0.1:9000/v1"
    assert adapter.options["api_key_env"] == "VLLM_API_KEY"
    assert PrincipalToken.objects.filter(principal_ref="team-search").count() == 2


def test_it_changes_nothing_on_a_dry_run(default_config_text, pool_config_text):
    run_import(default_config_text)
    before = mirror_counts()

    report = run_import(pool_config_text, dry_run=True)

    assert report.changed and "node gpu-a" in report.created
    assert mirror_counts() == before
    assert Node.objects.get().node_id == "node-local"


def test_it_moves_a_provider_to_a_new_adapter(default_config_text):
    run_import(default_config_text)
    edited = default_config_text.replace("adapter: echo-slow", "adapter: echo")

    report = run_import(edited)

    assert report.updated == [
        "provider echo-overflow (adapter: 'node-local/echo-slow' -> 'node-local/echo')"
    ]
    assert Provider.objects.get(provider_id="echo-overflow").adapter.adapter_id == "echo"


def test_it_updates_an_adapters_options(default_config_text):
    run_import(default_config_text)
    echo_options = Adapter.objects.get(adapter_id="echo").options
    edited = default_config_text.replace("token_delay_ms: 20", "token_delay_ms: 35")

    report = run_import(edited)

    assert report.updated == [
        "adapter node-local/echo-slow "
        "(options: {'token_delay_ms': 20.0} -> {'token_delay_ms': 35.0})"
    ]
    assert Adapter.objects.get(adapter_id="echo-slow").options == {"token_delay_ms": 35.0}
    assert Adapter.objects.get(adapter_id="echo").options == echo_options


def test_it_allows_only_one_active_revision(default_config_text):
    run_import(default_config_text)

    with pytest.raises(IntegrityError), transaction.atomic():
        ConfigRevision.objects.create(revision="sha256:x", yaml_text="", source="t", active=True)


def test_it_leaves_the_database_untouched_on_an_invalid_file(tmp_path, default_config_text):
    run_import(default_config_text)
    before = mirror_counts()
    bad = tmp_path / "bad.yaml"
    bad.write_text(default_config_text.replace("capacity: 2", "capacity: 0"))

    with pytest.raises(CommandError) as refused:
        call_command("import_config", str(bad))

    assert refused.value.returncode == 1
    assert "nodes[node-local].providers[echo-overflow].capacity: must be >= 1 (got 0)" in str(
        refused.value
    )
    assert mirror_counts() == before


def test_it_reports_creates_and_then_nothing_from_the_command(
    tmp_path, default_config_text, capsys
):
    path = tmp_path / "edge.yaml"
    path.write_text(default_config_text)

    call_command("import_config", str(path), "--dry-run")
    dry = capsys.readouterr().out
    assert "create provider echo-a" in dry and "dry run: 14 created" in dry
    assert Node.objects.count() == 0

    call_command("import_config", str(path))
    call_command("import_config", str(path))
    out = capsys.readouterr().out
    assert "create node node-local" in out
    assert out.strip().splitlines()[-2].startswith("nothing changed")


def test_it_reads_and_writes_in_bulk_not_row_by_row(django_assert_max_num_queries):
    with django_assert_max_num_queries(20):
        created = run_import(fleet(60))
    with django_assert_max_num_queries(20):
        updated = run_import(fleet(60, capacity=5))

    assert len(created.created) == 60 * 4 + 1
    assert len(updated.updated) == 60
    assert "provider echo-7 (capacity: 4 -> 5)" in updated.updated
    assert set(Provider.objects.values_list("capacity", flat=True)) == {5}


# Committed for real: the foreign keys are checked at commit, after the provider has moved.
@pytest.mark.django_db(transaction=True)
def test_it_keeps_a_moved_providers_routes_when_its_old_parent_goes(default_config_text):
    run_import(default_config_text)
    routes = set(Route.objects.values_list("model__model_id", "provider__provider_id"))
    edited = default_config_text.replace("adapter: echo-slow", "adapter: echo")
    edited = re.sub(r"      - id: echo-slow\n.*\n.*\n", "", edited)
    assert "echo-slow" not in edited

    report = run_import(edited)

    assert report.lines() == [
        "update provider echo-overflow (adapter: 'node-local/echo-slow' -> 'node-local/echo')",
        "delete adapter node-local/echo-slow",
    ]
    provider = Provider.objects.get(provider_id="echo-overflow")
    assert provider.adapter.adapter_id == "echo"
    assert set(Route.objects.values_list("model__model_id", "provider__provider_id")) == routes


def test_it_mirrors_a_model_whose_id_holds_a_slash():
    report = run_import(fleet(2))

    assert "route vendor/echo/echo-1" in report.created
    route = Route.objects.get(model__model_id="vendor/echo", provider__provider_id="echo-1")
    assert route.served_model == "echo-small"


def test_a_new_token_takes_the_hash_a_deleted_or_changed_token_frees(default_config_text):
    run_import(default_config_text)
    old_hash = PrincipalToken.objects.get(token_ref="cli-demo").token_hash_sha256
    # `cli-demo` goes; `a-new` and `z-new` are created with the hash it had and the one
    # `a-new` is later changed away from.
    replaced = default_config_text.replace("token_ref: cli-demo", "token_ref: z-new")
    run_import(replaced)
    assert PrincipalToken.objects.get().token_ref == "z-new"

    swapped = replaced.replace("token_ref: z-new", "token_ref: a-new").replace(
        "    - token_ref: a-new",
        "    - token_ref: z-new\n"
        f'      token_hash_sha256: "{"3" * 64}"\n'
        "      principal_ref: team-demo\n"
        "    - token_ref: a-new",
    )
    report = run_import(swapped)

    assert report.deleted == []
    assert report.created == ["principal token a-new"]
    assert report.updated == [
        f"principal token z-new (token_hash_sha256: {old_hash!r} -> {'3' * 64!r}; "
        "alias: 'demo' -> '')"
    ]
    assert dict(PrincipalToken.objects.values_list("token_ref", "token_hash_sha256")) == {
        "a-new": old_hash,
        "z-new": "3" * 64,
    }


def test_two_tokens_may_trade_hashes_in_one_import(default_config_text):
    second = (
        "    - token_ref: cli-second\n"
        f'      token_hash_sha256: "{"4" * 64}"\n'
        "      principal_ref: team-demo\n"
    )
    two = default_config_text.replace(
        "    - token_ref: cli-demo", second + "    - token_ref: cli-demo"
    )
    run_import(two)
    demo_hash = PrincipalToken.objects.get(token_ref="cli-demo").token_hash_sha256
    traded = two.replace("4" * 64, "swap").replace(demo_hash, "4" * 64).replace("swap", demo_hash)

    report = run_import(traded)

    assert report.deleted == report.created == []
    assert len(report.updated) == 2
    assert dict(PrincipalToken.objects.values_list("token_ref", "token_hash_sha256")) == {
        "cli-demo": "4" * 64,
        "cli-second": demo_hash,
    }


def test_a_provider_moved_to_another_node_s_adapter_of_the_same_id_points_at_that_one() -> None:
    run_import(fleet(2))
    moved = yaml.safe_load(fleet(2))
    nodes = moved["nodes"]
    nodes[1]["providers"].append(nodes[0]["providers"].pop())  # to node-1's own "echo"
    del nodes[0]  # and the node it left, with its adapter, goes

    report = run_import(yaml.safe_dump(moved))

    assert (
        "provider echo-0 (node: 'node-0' -> 'node-1'; adapter: 'node-0/echo' -> 'node-1/echo')"
        in (report.updated)
    )
    provider = Provider.objects.select_related("adapter__node").get(provider_id="echo-0")
    assert provider.adapter.node.node_id == "node-1" and provider.node.node_id == "node-1"
